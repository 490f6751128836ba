"""Process-wide settings a launcher opts into before training (``model.train.main``, ``macco train``, the
flow's train task): never a side effect of calling ``train()``, so a library caller or a test keeps its
process as it was."""
from __future__ import annotations

from contextlib import contextmanager

import torch


def keep_freed_cpu_memory() -> bool:
    """Make glibc's malloc keep freed memory for reuse, as a caching allocator (CUDA's, jemalloc) does.

    By default glibc hands a freed heap top above its (dynamic, at most 64 MB) trim threshold back to the OS, and
    the next step page-faults it in again. A MACCO step frees and re-grows more than that each step (two copies
    of every activation): 18–23k minor page faults per step on the tiny model at batch 32, against none for
    CLIP-FT's smaller swing. Raising the mmap and trim thresholds (both: setting only the trim threshold pins the
    mmap threshold at 128 kB, far worse) removes them. Process-wide and glibc-only; returns whether it applied.
    RSS then stays at the step's peak, as it does on a GPU with the caching allocator."""
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    limit = 1 << 30
    return bool(libc.mallopt(M_MMAP_THRESHOLD, limit)) and bool(libc.mallopt(M_TRIM_THRESHOLD, limit))


def apply_process_settings(cpu_keep_freed_memory: bool = True, device: str = "auto") -> None:
    """glibc keeping freed memory (CPU runs, ``cpu_keep_freed_memory``). TF32 is not process-wide: each run sets
    it for its own duration (``tf32``)."""
    cuda = torch.cuda.is_available() and device != "cpu"
    if not cuda and cpu_keep_freed_memory:
        keep_freed_cpu_memory()


@contextmanager
def tf32(enabled: bool):
    """TF32 matmuls and convolutions on CUDA (``TrainConfig.tf32``) while the block runs, the previous setting
    restored after it: a flow's later tasks in the same worker (evaluation: fp32) do not inherit a run's."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
