"""FlashChat's one version number: ``pyproject.toml``'s, as the installed package records it
(a bundle carries the same metadata), or read from ``pyproject.toml`` in a source tree that
was never installed."""

from __future__ import annotations

import re
from functools import cache
from importlib import metadata
from pathlib import Path


@cache
def version() -> str:
    try:
        return metadata.version("flashchat")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            match = re.search(r'^version = "([^"]+)"', pyproject.read_text(), re.MULTILINE)
        except OSError:
            match = None
        return match.group(1) if match else "unknown"
