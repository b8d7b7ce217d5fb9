"""Landlock (Linux >= 5.13): a process takes away its own access to the file system and to
TCP ports, for good and for all its future children, without privileges.

Called through ``ctypes`` (the three system calls of ``<linux/landlock.h>``): no binding of
it is a stable, maintained Python package.  The rights handled depend on the kernel's ABI
version; what the kernel does not know is neither handled nor granted.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Sequence
from pathlib import Path

from zarrchive.errors import ZarrchiveError

# x86_64, aarch64 and every other architecture since 5.13 share these numbers
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2
_PR_SET_NO_NEW_PRIVS = 38

# LANDLOCK_ACCESS_FS_*
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
_FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
# LANDLOCK_ACCESS_NET_* (ABI 4)
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
# LANDLOCK_SCOPE_* (ABI 6): abstract UNIX sockets and signals of processes outside the domain
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
_SCOPE_SIGNAL = 1 << 1

#: What a read-only tree of code may be used for.
READ_ONLY = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR


class LandlockUnavailable(ZarrchiveError):
    """The kernel has no Landlock (or it is disabled): the process was left as it was."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int


def _syscall(number: int, *args: object) -> int:
    result = int(_libc.syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    try:
        return _syscall(
            _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
        )
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EOPNOTSUPP):
            return 0
        raise


def handled_fs(abi: int) -> int:
    """The file-system rights a ruleset of *abi* handles (all that ABI knows)."""
    rights = _FS_ABI1
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


def no_new_privileges() -> None:
    """``PR_SET_NO_NEW_PRIVS``: no set-uid program or file capability grants anything again
    (Landlock needs it of an unprivileged process)."""
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def restrict_self(read_only: Sequence[Path], *, connect_ports: Sequence[int] = ()) -> int:
    """From now on this process (and its children) may only read, list and execute under the
    *read_only* trees, write nothing anywhere, and (ABI >= 4) make TCP connections to
    *connect_ports* only and bind none; (ABI >= 6) it can't signal or reach the abstract
    UNIX sockets of processes outside.  Returns the ABI version enforced.

    Raises :class:`LandlockUnavailable` when the kernel has none."""
    abi = abi_version()
    if abi < 1:
        raise LandlockUnavailable("this kernel has no Landlock")
    attr = _RulesetAttr(handled_access_fs=handled_fs(abi))
    size = ctypes.sizeof(_RulesetAttr)
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
    else:
        size -= ctypes.sizeof(ctypes.c_uint64)  # an older kernel refuses the unknown field
        if abi < 4:
            size -= ctypes.sizeof(ctypes.c_uint64)
    ruleset = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    try:
        for root in read_only:
            fd = os.open(root, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneathAttr(allowed_access=READ_ONLY, parent_fd=fd)
                if not root.is_dir():
                    rule.allowed_access = FS_EXECUTE | FS_READ_FILE
                _syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
            finally:
                os.close(fd)
        if abi >= 4:
            for port in connect_ports:
                net = _NetPortAttr(allowed_access=NET_CONNECT_TCP, port=port)
                _syscall(_SYS_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(net), 0)
        no_new_privileges()
        _syscall(_SYS_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)
    return abi
