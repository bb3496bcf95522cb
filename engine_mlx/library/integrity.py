"""Is a downloaded file the one the hub lists? Size, then content hash.

The hub gives a content hash for every file: LFS files (weights) carry the sha256 of their
content; small files carry their git blob id, the sha1 of ``b"blob <size>\\0" + content``.
Checking both means a model is installed only when every byte is the publisher's.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path

from engine_mlx.errors import EngineError
from engine_mlx.library.progress import check_cancel

BLOCK = 4 * 1024 * 1024


class IntegrityError(EngineError):
    """A downloaded file's size or hash differs from what the hub lists."""


def file_digests(
    path: Path,
    *,
    sha256: bool = True,
    git_sha1: bool = False,
    progress: Callable[[int], None] | None = None,
    cancel: threading.Event | None = None,
) -> dict[str, str]:
    """Hex digests of ``path``'s content, read once; ``progress(bytes_read)`` as it goes."""
    size = path.stat().st_size
    hashers = {}
    if sha256:
        hashers["sha256"] = hashlib.sha256()
    if git_sha1:
        hashers["git_sha1"] = hashlib.sha1(b"blob %d\0" % size)
    done = 0
    with path.open("rb") as fh:
        while block := fh.read(BLOCK):
            for h in hashers.values():
                h.update(block)
            done += len(block)
            if progress is not None:
                progress(done)
            check_cancel(cancel, "Cancelled while checking the download.")
    return {name: h.hexdigest() for name, h in hashers.items()}


def verify_file(
    path: Path,
    *,
    label: str,
    size: int,
    sha256: str | None = None,
    git_oid: str | None = None,
    progress: Callable[[int], None] | None = None,
    cancel: threading.Event | None = None,
) -> str:
    """Raise IntegrityError unless ``path`` has this size and hash; return its sha256."""
    actual = path.stat().st_size
    if actual != size:
        raise IntegrityError(f"{label} has {actual:,} bytes, the hub lists {size:,}.")
    digests = file_digests(
        path, sha256=True, git_sha1=git_oid is not None, progress=progress, cancel=cancel
    )
    if sha256 and digests["sha256"] != sha256.lower():
        raise IntegrityError(
            f"{label} is corrupt: its sha256 is {digests['sha256'][:16]}…, the hub lists "
            f"{sha256[:16]}…."
        )
    if git_oid and digests["git_sha1"] != git_oid.lower():
        raise IntegrityError(
            f"{label} is corrupt: its git hash is {digests['git_sha1'][:16]}…, the hub lists "
            f"{git_oid[:16]}…."
        )
    return digests["sha256"]
