"""Paths built from what a hub or a person supplied stay inside the folder they belong to.

A hub answer (commit ids, file names in a listing) and a download's saved state are data from
outside: a name like ``../../x`` or ``..\\x`` (a folder separator on Windows) would otherwise
let a hostile or broken server write anywhere the user can. Every such name is checked here
once, and every path joined from one is checked to resolve inside its root before anything is
written.
"""

from __future__ import annotations

import re
from pathlib import Path

from engine_mlx.errors import EngineError

COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SEGMENT = re.compile(r"^[^\x00-\x1f\x7f\\:*?\"<>|]{1,255}$")
MAX_PATH_CHARS = 1024


class UnsafePathError(EngineError):
    """A name from outside would point outside the folder it must stay in."""


def is_commit(text: object) -> bool:
    """A full git commit id, as the hub gives for a pinned revision."""
    return isinstance(text, str) and bool(COMMIT.match(text))


def is_safe_relative(name: object) -> bool:
    """``a/b.safetensors``: relative, forward slashes, no ``.``/``..`` segment, no backslash,
    drive letter, control character or character Windows forbids in a file name."""
    if not isinstance(name, str) or not name or len(name) > MAX_PATH_CHARS:
        return False
    parts = name.split("/")
    return all(p not in (".", "..") and _SEGMENT.match(p) for p in parts)


def inside(root: Path, *parts: str) -> Path:
    """``root / parts`` when it resolves inside ``root``; UnsafePathError otherwise."""
    path = root.joinpath(*parts)
    base = root.resolve()
    resolved = path.resolve()
    if resolved != base and base not in resolved.parents:
        raise UnsafePathError(
            f"Refused to write {'/'.join(parts)[:120]!r}: it would land outside {root}."
        )
    return path
