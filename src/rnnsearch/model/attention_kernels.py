"""Triton kernels of the decoder's additive attention (App. A.1.2) on a GPU, one target position i at a time
(`fused_gpu.DeepOutputKernels` runs them; the GRU steps' kernels are in `triton_kernels.py`): two each way, the
first of each a matrix product with the work that follows it, and one after the backward loop:

    attend_forward     W_a s_{i−1}; p_j = tanh(W_a s_{i−1} + U_a h_j), e_j = v_aᵀ p_j (shares over blocks of rows
                       and columns of n');  α = softmax(e) over real words,  c_i = Σ_j α_j h_j (over columns of ctx)
    attend_backward    ∂L/∂c_i = its part from the output layer + ∂L/∂x C (the GRU step's), ∂L/∂α_j = h_j · ∂L/∂c_i
                       (shares over blocks of rows and columns of ctx); softmax's backward de_j, kept per step, and
                       ∂L/∂(W_a s_{i−1}) = Σ_j de_j v_a ∘ (1 − p_j²), p recomputed
    keys_grad          after the loop: ∂L/∂(U_a h_j) = v_a ∘ Σ_i de_ij (1 − p_ij²) and ∂L/∂v_a = Σ_ij de_ij p_ij,
                       the steps summed in registers

p is never stored (16 MB a step at the paper's sizes): each kernel that needs it recomputes it from W_a s_{i−1}
and U_a h. U_a h may be read in the products' dtype (bf16 under autocast, as the encoder's product wrote it); h
is float32. Every value is computed in float32.
"""

from __future__ import annotations

from rnnsearch.model.triton_kernels import _grid, _pow2, triton

TC = 4  # source positions of a (rows, positions, columns) block in the kernels that follow a product

if triton is not None:
    import triton.language as tl

    from rnnsearch.model.triton_kernels import _dot, _tanh, _tile_of, _to

    @triton.jit
    def _sum_shares(SH, b, NJ: tl.constexpr, BT: tl.constexpr):
        """Σ_k SH[b, k, :]: the shares (B, NJ, BT) that row b's programs wrote of a sum over columns. A loop, not
        unrolled: unrolled over NJ = 32 shares, _energy_grad spilled 19.7 KB a thread to local memory at the paper's
        sizes (Triton 3.9's ptxas for sm_90: 32 registers), looped none (80)."""
        t = tl.arange(0, BT)
        total = tl.zeros([BT], dtype=tl.float32)
        for k in range(NJ):
            total += tl.load(SH + (b * NJ + k) * BT + t)
        return total

    @triton.jit
    def _query_energies(SL, sl_stride, W_a, NS, Q, q_stride, K, V, EP, B, Tx, NA: tl.constexpr, BM: tl.constexpr,
                        BN: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, TC: tl.constexpr,
                        PRECISION: tl.constexpr):
        """Program (rows, columns j·BN… of n'): q = W_a s_{i−1} (a product, rounded to Q's dtype and kept in Q),
        then p = tanh(q + U_a h_t) and the rows' shares of e_t = Σ v_a ∘ p over these columns into EP (B, NJ, BT),
        TC source positions at a time (0 beyond Tx)."""
        rows, cols, rok, cok = _tile_of(B, NA, BM, BN)
        q = _dot(tl.zeros([BM, BN], dtype=tl.float32), SL, sl_stride, rows, rok, W_a, 1, NS, cols, cok, NS, BK,
                 PRECISION)
        q = _to(q, Q)
        tl.store(Q + rows[:, None] * q_stride + cols[None, :], q, mask=rok[:, None] & cok[None, :])
        q = q.to(tl.float32)[:, None, :]
        v = tl.load(V + cols, mask=cok, other=0)[None, None, :]
        share = EP + (rows[:, None] * tl.num_programs(1) + tl.program_id(1)) * BT
        for t0 in tl.static_range(0, BT, TC):
            t = t0 + tl.arange(0, TC)
            at = (rows[:, None, None] * Tx + t[None, :, None]) * NA + cols[None, None, :]
            inside = rok[:, None, None] & (t < Tx)[None, :, None] & cok[None, None, :]
            p = _tanh(tl.load(K + at, mask=inside, other=0).to(tl.float32) + q)  # (BM, TC, BN)
            tl.store(share + t[None, :], tl.sum(p * v, axis=2), mask=rok[:, None])

    @triton.jit
    def _align(EP, NJ: tl.constexpr, M, A, a_stride, H, Cc, c_stride, C_lp, cl_stride, Tx, CTX: tl.constexpr,
               BT: tl.constexpr, BC: tl.constexpr):
        """Program (b, j): α from e's shares (every program alike; the first stores it), c_i over columns j·BC…"""
        b, j = tl.program_id(0), tl.program_id(1)
        t, cols = tl.arange(0, BT), j * BC + tl.arange(0, BC)
        inside, ok = t < Tx, cols < CTX
        e = _sum_shares(EP, b, NJ, BT)
        real = tl.load(M + b * Tx + t, mask=inside, other=0) != 0
        e = tl.where(real, e, float("-inf"))
        w = tl.exp(e - tl.max(e, axis=0))  # 0 on padding
        alpha = w / tl.sum(w, axis=0)
        tl.store(A + b * a_stride + t, alpha, mask=inside & (t * 0 + j == 0))  # the first program
        h = tl.load(H + (b * Tx + t[:, None]) * CTX + cols[None, :], mask=inside[:, None] & ok[None, :],
                    other=0).to(tl.float32)
        c = tl.sum(alpha[:, None] * h, axis=0)
        tl.store(Cc + b * c_stride + cols, c, mask=ok)
        tl.store(C_lp + b * cl_stride + cols, _to(c, C_lp), mask=ok)

    @triton.jit
    def _context_grad(DC, dc_stride, DXL, dxl_stride, K3, C_w, GC, gc_stride, H, DAP, B, Tx, CTX: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, TC: tl.constexpr,
                      PRECISION: tl.constexpr):
        """Program (rows, columns j·BN… of ctx): ∂L/∂c_i = DC + ∂L/∂x C (a product: DXL (B, ≥3n) ∂L/∂[a_h | a_zr] of
        the GRU step, C_w (3n, ctx); K3 = 0: none) into GC, then the rows' shares of ∂L/∂α_t = h_t · ∂L/∂c_i over
        these columns into DAP (B, NJ, BT), TC source positions at a time (0 beyond Tx)."""
        rows, cols, rok, cok = _tile_of(B, CTX, BM, BN)
        gc = _dot(tl.zeros([BM, BN], dtype=tl.float32), DXL, dxl_stride, rows, rok, C_w, CTX, 1, cols, cok, K3, BK,
                  PRECISION)
        ok = rok[:, None] & cok[None, :]
        gc += tl.load(DC + rows[:, None] * dc_stride + cols[None, :], mask=ok, other=0)
        tl.store(GC + rows[:, None] * gc_stride + cols[None, :], gc, mask=ok)
        share = DAP + (rows[:, None] * tl.num_programs(1) + tl.program_id(1)) * BT
        for t0 in tl.static_range(0, BT, TC):
            t = t0 + tl.arange(0, TC)
            at = (rows[:, None, None] * Tx + t[None, :, None]) * CTX + cols[None, None, :]
            inside = rok[:, None, None] & (t < Tx)[None, :, None] & cok[None, None, :]
            h = tl.load(H + at, mask=inside, other=0)  # (BM, TC, BN)
            tl.store(share + t[None, :], tl.sum(h * gc[:, None, :], axis=2), mask=rok[:, None])

    @triton.jit
    def _energy_grad(DAP, NJ: tl.constexpr, A, a_stride, Q, q_stride, K, V, DE, de_stride, DQ_lp, dql_stride, Tx,
                     NA: tl.constexpr, BT: tl.constexpr, BN: tl.constexpr):
        """Program (b, j): softmax's backward from ∂L/∂α's shares, de into DE (the first program), then over
        columns j·BN… of n', p recomputed from W_a s and U_a h: ∂L/∂(W_a s) = Σ_j de_j v_a ∘ (1 − p_j²) into DQ_lp
        (the products' dtype)."""
        b, j = tl.program_id(0), tl.program_id(1)
        t, cols = tl.arange(0, BT), j * BN + tl.arange(0, BN)
        inside, ok = t < Tx, cols < NA
        dalpha = _sum_shares(DAP, b, NJ, BT)
        alpha = tl.load(A + b * a_stride + t, mask=inside, other=0)
        de = alpha * (dalpha - tl.sum(alpha * dalpha, axis=0))  # 0 on padding
        tl.store(DE + b * de_stride + t, de, mask=inside & (t * 0 + j == 0))  # the first program
        q = tl.load(Q + b * q_stride + cols, mask=ok, other=0).to(tl.float32)
        k = tl.load(K + (b * Tx + t[:, None]) * NA + cols[None, :], mask=inside[:, None] & ok[None, :],
                    other=0).to(tl.float32)
        p = _tanh(k + q[None, :])
        v = tl.load(V + cols, mask=ok, other=0)
        dq = tl.sum(de[:, None] * (1 - p * p), axis=0) * v  # through p = tanh(·)
        tl.store(DQ_lp + b * dql_stride + cols, _to(dq, DQ_lp), mask=ok)

    @triton.jit
    def _keys_grad(DE, de_b, de_i, Q, q_i, q_b, K, V, DK, DVP, Ty, Tx, NA: tl.constexpr, BJ: tl.constexpr,
                   BN: tl.constexpr):
        """Program (b, jb, k), after the backward loop: ∂L/∂(U_a h_j) = v_a ∘ Σ_i de_ij (1 − p_ij²) for source
        positions jb·BJ… and columns k·BN… of n' into DK, and this tile's share of ∂L/∂v_a = Σ_ij de_ij p_ij into
        DVP (B, NJB, n'); p_ij = tanh(W_a s_{i−1} + U_a h_j) recomputed from Q (Ty, B, ≥n') and K (B, Tx, n')."""
        b, jb, kb = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        js, cols = jb * BJ + tl.arange(0, BJ), kb * BN + tl.arange(0, BN)
        inside, ok = js < Tx, cols < NA
        at = (b * Tx + js[:, None]) * NA + cols[None, :]
        both = inside[:, None] & ok[None, :]
        k = tl.load(K + at, mask=both, other=0).to(tl.float32)
        dk = tl.zeros([BJ, BN], dtype=tl.float32)
        dv = tl.zeros([BJ, BN], dtype=tl.float32)  # summed over the positions j once, after the loop
        for i in range(Ty):
            q = tl.load(Q + i * q_i + b * q_b + cols, mask=ok, other=0).to(tl.float32)
            de = tl.load(DE + b * de_b + i * de_i + js, mask=inside, other=0)
            p = _tanh(k + q[None, :])
            dk += de[:, None] * (1 - p * p)
            dv += de[:, None] * p
        v = tl.load(V + cols, mask=ok, other=0)
        tl.store(DK + at, dk * v[None, :], mask=both)
        tl.store(DVP + (b * tl.num_programs(1) + jb) * NA + cols, tl.sum(dv, axis=0), mask=ok)


def _tile(Tx: int, *widths: int) -> tuple[int, ...]:
    """Rows BT ≥ Tx (a power of 2) and, for each width, the columns of a program's (BT, ·) tile."""
    BT = _pow2(Tx)
    return (BT, *(min(_pow2(w), max(16, 8192 // BT)) for w in widths))


def attend_forward(SL, W_a, Q, K, V, H, M, A, Cc, C_lp):
    """SL (B, n) s_{i−1} and W_a (n', n) in the products' dtype, K (B, Tx, n') U_a h, V (n') v_a, H (B, Tx, ctx) h,
    M (B, Tx) uint8 1 on real words → Q (B, n') W_a s_{i−1}, A (B, ·) α, Cc (B, ·) c_i and C_lp (B, ctx) c_i in the
    products' dtype. Two kernels: W_a s_{i−1}, p and e's shares over (rows, columns of n'), then α and c over (row,
    columns of ctx). K may be in the products' dtype; every value is computed in float32."""
    B, Tx, NA = K.shape
    CTX = H.size(2)
    BT, _, BC = _tile(Tx, NA, CTX)
    grid, tiles = _grid(B, NA, W_a.dtype)
    EP = A.new_empty(B, grid[1], BT)
    _query_energies[grid](SL, SL.stride(0), W_a, SL.size(1), Q, Q.stride(0), K, V, EP, B, Tx, NA, **tiles, BT=BT,
                          TC=TC)
    _align[(B, triton.cdiv(CTX, BC))](EP, grid[1], M, A, A.stride(0), H, Cc, Cc.stride(0), C_lp, C_lp.stride(0), Tx,
                                      CTX, BT=BT, BC=BC, num_warps=4)


def attend_backward(DC, DXL, C_w, GC, Q, K, A, H, V, DE, DQ_lp):
    """∂L/∂c_i = DC + DXL[:, :3n] C_w (DXL the GRU step's ∂L/∂[a_h | a_zr] in the products' dtype, C_w (3n, ctx)
    [C; C_z; C_r] in that dtype; DXL None at the last position) into GC; the softmax's backward de (B, Tx) into DE;
    ∂L/∂(W_a s_{i−1}) into DQ_lp (the products' dtype), p recomputed from Q and K as attend_forward took them. Two
    kernels, as attend_forward; `keys_grad` turns every step's de into ∂L/∂(U_a h) and ∂L/∂v_a after the loop."""
    B, Tx, NA = K.shape
    CTX = H.size(2)
    BT, BN, _ = _tile(Tx, NA, CTX)
    grid, tiles = _grid(B, CTX, C_w.dtype)
    DAP = A.new_empty(B, grid[1], BT)
    dxl, k3 = (DXL, C_w.size(0)) if DXL is not None else (C_w, 0)  # no product: any pointer of its dtype
    _context_grad[grid](DC, DC.stride(0), dxl, dxl.stride(0), k3, C_w, GC, GC.stride(0), H, DAP, B, Tx, CTX, **tiles,
                        BT=BT, TC=TC)
    _energy_grad[(B, triton.cdiv(NA, BN))](DAP, grid[1], A, A.stride(0), Q, Q.stride(0), K, V, DE, DE.stride(0), DQ_lp,
                                           DQ_lp.stride(0), Tx, NA, BT=BT, BN=BN, num_warps=4)


def keys_grad(DE, Q, K, V):
    """From DE (B, Ty, Tx) every step's de, Q (Ty, B, ≥n') W_a s_{i−1} and K (B, Tx, n') U_a h: ∂L/∂(U_a h)
    (B, Tx, n') and ∂L/∂v_a (n'), in float32. One kernel over (row, source positions, columns of n'), the steps
    summed in registers (where adding into ∂L/∂(U_a h) at every step read and wrote it 2·Ty times)."""
    B, Ty, Tx = DE.shape
    NA = K.size(2)
    BJ, BN = min(_pow2(Tx), 32), min(_pow2(NA), 128)
    grid = (B, triton.cdiv(Tx, BJ), triton.cdiv(NA, BN))
    DK, DVP = DE.new_empty(B, Tx, NA), DE.new_empty(B, grid[1], NA)
    _keys_grad[grid](DE, DE.stride(0), DE.stride(1), Q, Q.stride(0), Q.stride(1), K, V, DK, DVP, Ty, Tx, NA, BJ=BJ,
                     BN=BN, num_warps=4)
    return DK, DVP.sum((0, 1))


__all__ = ["attend_backward", "attend_forward", "keys_grad"]
