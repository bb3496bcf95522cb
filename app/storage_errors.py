"""What went wrong with the history file, in words a person can act on.

Why a module of its own: "damaged" must mean damaged. A full disk, a disk that fails to read
or write, a file another program holds or one the user may not write all leave a healthy
history, and moving it aside (the way out offered for a damaged one) would only hide it. SQLite
tells these apart by its result codes (``sqlite_errorcode``): SQLITE_FULL, SQLITE_IOERR,
SQLITE_BUSY…; the operating system by ``errno`` (ENOSPC). Only SQLITE_CORRUPT and
SQLITE_NOTADB, or a failed integrity check, call the file damaged.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
from pathlib import Path

# SQLite's primary result codes (the low byte of an extended code).
SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY, SQLITE_IOERR = 5, 6, 8, 10
SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_NOTADB = 11, 13, 14, 26
# Room a write may need: the write-ahead log grows to ~4 MB (1000 pages) before it is folded
# into the file, and the file grows by what is written.
HEADROOM_BYTES = 8 * 1024 * 1024
DAMAGED_HINT = "move or rename it to start a fresh history, or restore it from a backup."


class StorageError(Exception):
    """The history cannot be used; the message names the file and is fit to show the user.
    ``file_unusable``: the file itself cannot be used (damaged, or not one this FlashChat
    reads), so moving it aside is the way out; otherwise the file is fine and stays."""

    def __init__(self, message: str, *, file_unusable: bool = False) -> None:
        super().__init__(message)
        self.file_unusable = file_unusable


def _size(count: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    return ""  # not reached


def free_bytes(path: Path) -> int | None:
    """Free space on the disk that holds ``path`` (its nearest existing folder)."""
    folder = Path(path).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _codes(exc: BaseException) -> tuple[int | None, int | None]:
    code = getattr(exc, "sqlite_errorcode", None)
    return (code & 0xFF if isinstance(code, int) else None), getattr(exc, "errno", None)


def disk_full(path: Path, exc: BaseException | None = None) -> StorageError:
    free = free_bytes(path)
    folder = Path(path).parent
    if free is not None and free >= HEADROOM_BYTES:  # a quota, or a size limit on the file
        return StorageError(
            f"FlashChat could not save to its history {path}: the system reports it full "
            f"({exc}) though {_size(free)} are free in {folder} — a disk quota or file size "
            "limit may apply. The history itself is fine; nothing needs to be moved."
        )
    now = "" if free is None else f" ({_size(free)} free)"
    return StorageError(
        f"The disk that holds FlashChat's history is full: {folder}{now}. FlashChat needs "
        f"about {_size(HEADROOM_BYTES)} free there to save; free some space, or set "
        "FLASHCHAT_HOME to a folder on another disk, then try again. The history itself "
        "is fine; nothing needs to be moved."
    )


def storage_error(path: Path, problem: str, exc: BaseException) -> StorageError:
    """The StorageError for ``exc`` (sqlite3 or OS) met while the file ``problem``."""
    code, err = _codes(exc)
    if code == SQLITE_FULL or err in (errno.ENOSPC, errno.EDQUOT):
        return disk_full(path, exc)
    if code == SQLITE_IOERR or err == errno.EIO:
        free = free_bytes(path)
        if free is not None and free < HEADROOM_BYTES:  # a write that ran out of room
            return disk_full(path, exc)
        return StorageError(
            f"The FlashChat history {path} {problem}: the disk reported an error ({exc}). "
            "The file itself may well be fine: check the disk (or that it is still "
            "connected), then restart FlashChat."
        )
    if code in (SQLITE_BUSY, SQLITE_LOCKED):
        return StorageError(
            f"The FlashChat history {path} {problem}: another program holds it ({exc}). "
            "Close other FlashChat windows or programs using it, then try again."
        )
    if code in (SQLITE_READONLY, SQLITE_CANTOPEN) or err in (errno.EACCES, errno.EPERM,
                                                            errno.EROFS):  # fmt: skip
        return StorageError(
            f"The FlashChat history {path} {problem}: FlashChat may not write there ({exc}). "
            f"Check the permissions of {Path(path).parent} (or set FLASHCHAT_HOME to a folder "
            "you can write), then restart FlashChat."
        )
    if code in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return damaged(path, f"is not a SQLite database, or is damaged ({exc})")
    return StorageError(f"The FlashChat history {path} {problem} ({exc}).")


def damaged(path: Path, problem: str) -> StorageError:
    """The file itself cannot be used: it has been left untouched, and may be moved aside."""
    return StorageError(
        f"The FlashChat database {path} {problem}. It has been left untouched: {DAMAGED_HINT}",
        file_unusable=True,
    )


def is_storage_failure(exc: BaseException) -> bool:
    """sqlite3 errors that are about the file or disk, not a bug in the caller."""
    bugs = (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError)
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, bugs)
