"""Turn training outputs into a shippable pair: the layout ``engine_mlx.companions`` reads.

A drafter checkpoint holds fp32 weights, the optimizer's moments and the history; an MTP file
is fp32 beside its history. What ships is the weights in float16 (half the size; the engine
computes in its own dtype anyway), the draft vocabulary, and the histories for the model card,
with no optimizer state. Written to a fresh folder that then replaces ``out``, so a failed
export leaves the previous pair in place.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import mlx.core as mx

from engine_mlx.companions import DRAFTER_SUFFIX, MTP_FILE
from engine_mlx.decoding.draft_vocab import FILE as DRAFT_VOCAB_FILE
from engine_mlx.models.mtp import DRAFT_STEPS_KEY
from engine_mlx.training.dflash import HISTORY_FILE

DRAFTER_HISTORY = "drafter_history.json"
MTP_HISTORY = "mtp_history.json"


def export_pair(
    name: str, drafter: Path, mtp: Path | None, out: Path, mtp_steps: int | None = None
) -> Path:
    """``out``/<name>-DFlash2/ (config, fp16 weights, draft vocabulary), ``out``/mtp.safetensors
    (fp16, its metadata kept, plus ``draft_steps`` = ``mtp_steps``, the draft length measured
    best for it, where given) and the histories; ``name`` is the target's folder name. With
    ``mtp`` None only the drafter ships (a head that does not pay yet is left out)."""
    inputs = [drafter / "config.json", drafter / "model.safetensors", *([mtp] if mtp else [])]
    for path in inputs:
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: train it first")
    tmp = out.with_name(f"{out.name}.exporting")
    shutil.rmtree(tmp, ignore_errors=True)
    folder = tmp / f"{name}{DRAFTER_SUFFIX}"
    folder.mkdir(parents=True)
    shutil.copy2(drafter / "config.json", folder / "config.json")
    if (drafter / DRAFT_VOCAB_FILE).is_file():
        shutil.copy2(drafter / DRAFT_VOCAB_FILE, folder / DRAFT_VOCAB_FILE)
    _half(drafter / "model.safetensors", folder / "model.safetensors")
    histories = [(drafter / HISTORY_FILE, DRAFTER_HISTORY)]
    if mtp is not None:
        extra = {DRAFT_STEPS_KEY: str(mtp_steps)} if mtp_steps else {}
        _half(mtp, tmp / MTP_FILE, extra)
        histories.append((mtp.with_suffix(".json"), MTP_HISTORY))
    for source, target in histories:
        if source.is_file():
            shutil.copy2(source, tmp / target)
    keep = [p for p in out.iterdir() if p.suffix in (".md", ".png")] if out.is_dir() else []
    for extra in keep:  # the model card and its figures are written by hand, not exported
        shutil.copy2(extra, tmp / extra.name)
    old = out.with_name(f"{out.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.replace(old)
    tmp.replace(out)
    shutil.rmtree(old, ignore_errors=True)
    return out


def _half(source: Path, target: Path, metadata_extra: dict[str, str] | None = None) -> None:
    weights, metadata = mx.load(str(source), return_metadata=True)
    metadata = {**metadata, **(metadata_extra or {})}
    half = {k: v.astype(mx.float16) if v.dtype == mx.float32 else v for k, v in weights.items()}
    mx.save_safetensors(str(target), half, metadata=metadata)
