"""CPU runtime settings of the processes that run the model (training, decoding, benchmarks).

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

log = logging.getLogger("rnnsearch.cpu")

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_MAX = -4
_done = False


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
