"""The C allocator of the archive's long-lived processes: ``zarrchive serve`` and its API
worker processes (``zarrchive worker`` runs each job in a forked child, whose memory goes
back to the system when it exits).

glibc's ``malloc`` gives a block of 128 KiB or more a mapping of its own, returned to the
system when the block is freed.  But when such a block is freed, glibc raises that threshold
to the block's size (up to 32 MiB), and the trimming threshold of its heaps to twice that:
after the first 8 MiB buffer, every buffer up to 8 MiB is carved from the heap of the
calling thread's arena, and what is freed there mostly stays in the process.  A manifest job
of a 10^6-entry Zarr streams over 200 MiB through such buffers (S3 reads, upload parts,
spooled bodies) in threads of its own: a long-lived server kept 50-60 MiB more after every
one, free but held by the allocator (issue #23 item 5: 185 MiB resting, 384 MiB after two
manifests and two publishes).

:func:`map_large_blocks` fixes the threshold at :data:`LARGE_BLOCK` (``M_MMAP_THRESHOLD``;
setting it turns glibc's adjustment off, of this threshold and of the trimming one): a block
that large is always mapped apart and given back when freed, whatever was freed before.
The same as ``MALLOC_MMAP_THRESHOLD_=1048576`` in the environment, made by the process
itself.  Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

#: Blocks of this size or more get a mapping of their own (glibc's ``M_MMAP_THRESHOLD``).
LARGE_BLOCK = 1024 * 1024
#: glibc's ``mallopt`` parameter number of the mapping threshold (``malloc.h``).
_M_MMAP_THRESHOLD = -3


def map_large_blocks(threshold: int = LARGE_BLOCK) -> bool:
    """Make glibc map every block of *threshold* bytes or more apart, for good (see the
    module); whether it did (False elsewhere than glibc)."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    if not hasattr(libc, "gnu_get_libc_version"):  # musl and others have no such mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    if not done:
        log.warning("the C allocator refused a mapping threshold of %d bytes", threshold)
    return done
