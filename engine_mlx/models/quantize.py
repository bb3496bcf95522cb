"""Write an MLX-quantized copy of a model folder: the file ``mlx_lm.convert -q`` writes.

mlx-lm does the work (``quantize_model`` and ``save``: affine weights, float scales and biases
per group, the ``quantization`` block in config.json), so a folder quantized here is the same
kind of file a Mac user downloads from mlx-community, and runs on a Mac unchanged. What is ours
is the checking around it: a folder that is already quantized, or a destination that holds
something, is refused with a message, and the copy is written beside the destination and
renamed into place, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

from engine_mlx.errors import ModelLoadError
from engine_mlx.models.gguf.importer import MARKER_NAME as IMPORT_MARKER
from engine_mlx.models.loading import validate_model_folder

BITS = (4, 8)
GROUPS = (32, 64, 128)
DEFAULT_GROUP = 64  # mlx-lm's default and mlx-community's usual choice
QUANTIZE_MARKER = "flashchat_quantized.json"


def default_destination(source: Path, bits: int) -> Path:
    """``Qwen2.5-0.5B`` -> ``Qwen2.5-0.5B-4bit`` beside it (mlx-community's naming)."""
    return source.with_name(f"{source.name}-{bits}bit")


def quantize_folder(
    source: str | Path, out: str | Path, *, bits: int, group: int = DEFAULT_GROUP
) -> Path:
    """Quantize the model in ``source`` to ``bits`` (4 or 8) in groups of ``group`` into the
    new folder ``out``, and return ``out``. ModelLoadError for anything a person must fix."""
    from mlx_lm.utils import load, quantize_model, save

    if bits not in BITS or group not in GROUPS:
        raise ModelLoadError(
            f"Cannot quantize to {bits} bits in groups of {group}: choose bits 4 or 8 and a "
            "group of 32, 64 or 128."
        )
    spec = validate_model_folder(source)
    existing = spec.config.get("quantization") or spec.config.get("quantization_config")
    if existing:
        raise ModelLoadError(
            f"{spec.name} is quantized already ({existing.get('bits', '?')} bits); quantize "
            "its full-precision original instead."
        )
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ModelLoadError(f"{out} exists and is not empty; choose another destination.")
    work = out.parent / f".{out.name}.quantizing-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        model, tokenizer, config = load(str(spec.path), return_config=True, lazy=True)
        model, config = quantize_model(model, config, group, bits)
        save(work, spec.path, model, tokenizer, config)
        _write_marker(work, spec.path, bits, group)
        if out.exists():
            out.rmdir()
        os.replace(work, out)
    except OSError as exc:
        raise ModelLoadError(f"Cannot write {out}: {exc}") from exc
    except MemoryError:
        raise ModelLoadError(f"Not enough memory to quantize {spec.name}.") from None
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return out


def _write_marker(folder: Path, source: Path, bits: int, group: int) -> None:
    """What the copy was made from (and the GGUF behind that, for the bench's llama.cpp)."""
    marker: dict[str, object] = {"source": source.name, "bits": bits, "group_size": group}
    try:
        imported = json.loads((source / IMPORT_MARKER).read_text(encoding="utf-8"))
        marker["source_name"] = imported["source_name"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    (folder / QUANTIZE_MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")


def quantized_source(folder: Path) -> str | None:
    """The name of the model a folder was quantized from here (its marker), or None."""
    try:
        return str(json.loads((folder / QUANTIZE_MARKER).read_text(encoding="utf-8"))["source"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
