"""Where and how a stage runs: the device, bf16 support, the git commit of the code, and the CPU allocator.

The allocator (`keep_freed_memory`) is for the processes that run the model (training, decoding, benchmarks).

glibc hands allocations above its mmap threshold (at most 32 MB) to the kernel with mmap and gives them back
with munmap when freed, and trims the top of its heap. A training update allocates and frees the same large
tensors every step (the logits of a batch at the paper's size are 80 × 51 × 30003 floats, 490 MB), so each
update faults all of that memory in again, page by page, and the kernel zeroes it. Measured on the paper-size
RNNsearch update (batch 80, 50 words, 2 threads): 28 s of system time in 5 updates, log-softmax at 0.86 s
instead of 0.07 s. Keeping freed memory in the process (no mmap, no trimming) removes that; the cost is
that the process keeps its peak heap (resident memory does not shrink between updates).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from rnnsearch.textio import InputError

if TYPE_CHECKING:
    import torch

log = logging.getLogger("rnnsearch.runtime")

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_MAX = -4
_done = False


def cpu_name() -> str:
    """The processor's model name (/proc/cpuinfo), e.g. "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"; where
    there is none (macOS, an emulator), the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def keep_freed_memory() -> bool:
    """Ask glibc to serve every allocation from its heap and never return freed memory to the kernel.

    Returns whether the setting took effect (False on a C library without mallopt, e.g. macOS or musl).
    """
    global _done
    if _done:
        return True
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, -1) == 1  # -1: SIZE_MAX as glibc's size_t
    _done = ok
    log.debug("glibc mallopt: no mmap, no trimming: %s", ok)
    return ok


def resolve_device(name: str, key: str) -> "torch.device":
    """The device params.yaml's `key` (train.device, decode.device) names. `auto` takes CUDA when there is one, and
    falls back to the CPU where there is none, saying so where the scheduler allocated a GPU (CUDA_VISIBLE_DEVICES
    set) that CUDA cannot use; `cuda` without a usable GPU stops: a lost GPU request would otherwise train for weeks
    on the CPU."""
    import torch

    if name == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    allocated = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if name == "cuda":
        raise InputError(f"{key}: cuda, but CUDA is not available here (torch {torch.__version__}, "
                         f"CUDA_VISIBLE_DEVICES={allocated or 'unset'}); check the job's GPU request, or set {key}: "
                         "auto, which falls back to the CPU")
    if allocated not in ("", "-1"):
        log.warning("%s: %s, and a GPU was allocated (CUDA_VISIBLE_DEVICES=%r), but CUDA is not available here: "
                    "running on the CPU", key, name, allocated)
    return torch.device("cpu")


def native_bf16_cpu() -> bool:
    """Whether bf16 matrices are multiplied in hardware here (AVX512-BF16 or AMX); elsewhere oneDNN emulates them.
    Instructions that the CPU has but this process may not use count as absent: ATEN_CPU_CAPABILITY below avx512 or
    ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16 (as when a machine stands in for one without AVX-512)."""
    import torch

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu's own probes (private)
    if not any(getattr(torch.cpu, name, lambda: False)() for name in checks):
        return False
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "ALL")).upper()
    allowed = isa in ("", "ALL") or any(s in isa for s in ("BF16", "FP16", "AMX", "AVX10"))
    return allowed and torch.backends.cpu.get_cpu_capability() not in ("DEFAULT", "NO AVX", "AVX2")


def git_commit() -> str:
    """The commit of the code that runs (with +dirty when the tree has changes), or 'unknown' outside git."""
    repo = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def proc_mb(field: str, path: str = "/proc/self/status") -> float:
    """A 'Field:  N kB' line of a /proc file, in MB (VmHWM: this process image's peak resident memory)."""
    for line in Path(path).read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"{path}: no {field}")
