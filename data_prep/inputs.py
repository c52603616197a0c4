"""Opening input files the way a hostile corpus cannot exploit: regular files only, bounded reads.

Every CLI that reads a user-named file goes through here. A FIFO, a device (``/dev/zero``), a
directory, a socket or anything under ``/proc``, ``/sys`` or ``/dev`` is refused before a byte is read,
so nothing can make a stage block forever or read an endless stream. Problems are ``InputError``
(``path: problem``), never a raw ``OSError``.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

SPECIAL_ROOTS = ("/proc", "/sys", "/dev")
MAX_SMALL_FILE_BYTES = 64 * 1024 * 1024  # YAML cases, configs, keys: read whole, so bounded


class InputError(ValueError):
    """An input file that cannot be read as data: ``path: problem``."""

    def __init__(self, path: str | Path, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


def os_problem(exc: OSError) -> str:
    """A short human reason for an OSError (no traceback, no repr)."""
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    return exc.strerror or type(exc).__name__


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _special(path: Path) -> bool:
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return False
    return any(real == root or real.startswith(root + "/") for root in SPECIAL_ROOTS)


def open_regular(path: str | Path) -> BinaryIO:
    """Open ``path`` for binary reading if it is a regular data file, else raise InputError.

    Opened non-blocking so a FIFO cannot stall the open itself; the type is then checked on the open
    descriptor (no race between the check and the read)."""
    p = Path(path)
    if _special(p):
        raise InputError(p, "a special file (/proc, /sys or /dev), not data")
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(p, f"cannot open: {os_problem(exc)}") from None
    except ValueError as exc:  # embedded NUL in the name
        raise InputError(p, f"cannot open: {exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(p, f"{_kind(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str | Path) -> None:
    """Raise InputError unless ``path`` names a readable regular file (opens and closes it)."""
    open_regular(path).close()


def read_bytes(path: str | Path, limit: int = MAX_SMALL_FILE_BYTES) -> bytes:
    """The whole of a small regular file; InputError when it is larger than ``limit`` or unreadable."""
    with open_regular(path) as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise InputError(path, f"cannot read: {os_problem(exc)}") from None
    if len(data) > limit:
        raise InputError(path, f"larger than {limit} bytes")
    return data


def read_text(path: str | Path, limit: int = MAX_SMALL_FILE_BYTES) -> str:
    """``read_bytes`` decoded as UTF-8 (a leading BOM is dropped); InputError names the bad byte."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}", f"not UTF-8 (byte {exc.start})") from None
