"""Closed-form FLOP counts of the models, for utilisation (FLOP/s ÷ the machine's measured GEMM FLOP/s).

The peer benchmark's conventions (the JoeyNMT peer benchmark's): only matrix products count, 2 FLOPs per
multiply-add; training is 3 × the forward pass. For one sentence pair with S source and T target positions
(</s> included), sizes m, n, n' = n_align, l, g gates per cell (GRU 3, LSTM 4), d = 1 or 2 directions,
annotations of size a = d·n, and K target words:

    encoder              S · d · 2g·n(m + n)                       (nn.GRU / nn.LSTM over the source)
    attention keys       S · 2a·n'   (additive: U_a h_j; multiplicative: 2a·n; dot: 0)
    per decoder step     additive: 2n·n' (W_a s) + 2S·n' (v_a) + 2S·a (c = Σ α h)
                         multiplicative: 2S·n + 2S·a; dot: 4S·a; none: 0
    deep output decoder  T · 2m·g·n (W E y, one GEMM)  +  (T − 1) · [2c·g·n (C c) + 2g·n² (U s)]
                         + T · [4l(n + m + c) (U_o, V_o, C_o) + 2l·K (W_o)]        c = a, or n without attention
    combined output      T · [2m·g·n + 2g·n² + (2n·g·n with input feeding) + 2(a + n)·n (W_u) + 2n·K]
    initial state        2n² (W_s) (+ 2a·n for V without attention); combined output 2a·n (+ 2a·n, LSTM W_c)

The deep-output decoder skips the state update after the last position (never read), hence T − 1. This is what
the code executes: `tests/test_flops.py` checks it against torch's own FLOP counter for every preset.
"""

from __future__ import annotations

from rnnsearch.model.attention import variant


def forward_flops(cfg: dict, K: int, S: int, T: int) -> int:
    """Matrix-product FLOPs of the teacher-forced forward pass of one sentence pair (S, T include </s>)."""
    m, n, n_att, l = cfg["m"], cfg["n"], cfg["n_align"], cfg["l"]
    g = 3 if cfg["cell"] == "gru" else 4
    a = (2 if cfg["bidirectional"] else 1) * n
    att = cfg["attention"]
    encoder = S * (2 if cfg["bidirectional"] else 1) * 2 * g * n * (m + n)
    keys, step_att = variant(cfg).flops(a, n, n_att, S, cfg) if att != "none" else (0, 0)  # each counts its own
    if cfg["combined_output"]:
        init = 2 * a * n * (2 if cfg["cell"] == "lstm" else 1)
        step = 2 * m * g * n + 2 * g * n * n + (2 * n * g * n if cfg["input_feeding"] else 0) + step_att \
            + 2 * (a + n) * n + 2 * n * K
        decoder = T * step
    else:
        c = a if att != "none" else n
        init = 2 * n * n + (2 * a * n if att == "none" else 0)
        decoder = T * (2 * m * g * n + step_att + 4 * l * (n + m + c) + 2 * l * K) \
            + (T - 1) * (2 * c * g * n + 2 * g * n * n)
    return encoder + keys + init + decoder


def train_flops(cfg: dict, K: int, S: int, T: int) -> int:
    """One training step's FLOPs for one pair: forward and backward, 3 × forward (the peer's convention)."""
    return 3 * forward_flops(cfg, K, S, T)
