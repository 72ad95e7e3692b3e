"""Keep freed memory in the process between partitions instead of handing it back to the kernel.

glibc's ``malloc`` serves big blocks with ``mmap`` and trims the top of its heap as soon as a few
hundred KiB lie free there, raising both limits as it goes. Reading state does the same thing once per
partition: megabytes of decompressed files and key arrays, allocated, used, freed. With the default
limits every partition's memory comes fresh from the kernel, one page fault per 4 KiB: on the 20M-key
checkpoint ``statelens growth`` took 2 GB of page faults, 1.3 s of its 4.2 s. Fixed limits of 32 MiB
(blocks below it come from the heap; up to 32 MiB may lie free before the heap is trimmed) keep that
memory mapped, at a cost of at most 32 MiB of RSS after a peak.

Only the entry point (:func:`app.launcher.main`) and the benchmarks call :func:`tune`: it is a choice
for the whole process, not for a library to make.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["LIMIT_BYTES", "tune"]

#: The fixed mmap and trim thresholds (glibc caps the mmap threshold at 32 MiB on 64-bit machines).
LIMIT_BYTES = 32 * 1024 * 1024

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune() -> bool:
    """Set glibc's mmap and trim thresholds to :data:`LIMIT_BYTES`; True if it took. Other C libraries
    (macOS, Windows, musl) are left alone, and so is a process whose environment set them already
    (``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_``)."""

    if not sys.platform.startswith("linux"):
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        # glibc's name for itself on every Linux statelens runs on; ctypes.util.find_library would cost
        # every command ~5 ms (its import brings subprocess, and it runs ldconfig)
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, LIMIT_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, LIMIT_BYTES))
