"""A drafter from wherever one comes: a checkpoint folder or a llama.cpp drafter GGUF."""

from __future__ import annotations

from pathlib import Path

from engine_mlx.models.dflash import DFlashModel, load_dflash
from engine_mlx.models.gguf.drafter import load_drafter_gguf


def load_drafter(path: str | Path) -> DFlashModel:
    """``path`` a drafter folder (``models.dflash``) or a ``.gguf`` of architecture
    ``dflash`` (``models.gguf.drafter``)."""
    source = Path(path).expanduser()
    if source.suffix == ".gguf" and source.is_file():
        return load_drafter_gguf(source)
    return load_dflash(source)
