"""The marker files of the library: a download's state while in flight, a model's manifest
once installed.

A folder under the library is installed only once it holds ``flashchat_model.json``,
written last into the staging folder before that folder is renamed into place: what was
installed from where (hub repo and commit, a local folder, a GGUF), and each file's size and
sha256. Writes go through a temporary file and ``os.replace``, so a crash leaves either the
old content or the new, never half of one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

MANIFEST_NAME = "flashchat_model.json"
STATE_NAME = "flashchat_download.json"
PARTIAL_DIR = ".partial"
FORMAT_VERSION = 1


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when missing or unreadable (never raises)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_manifest(folder: Path) -> dict[str, Any] | None:
    return read_json(folder / MANIFEST_NAME)


def write_manifest(folder: Path, data: dict[str, Any]) -> None:
    write_json_atomic(folder / MANIFEST_NAME, {"format": FORMAT_VERSION, **data})


def partial_root(root: Path) -> Path:
    return root / PARTIAL_DIR
