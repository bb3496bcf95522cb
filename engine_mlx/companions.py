"""The speculators shipped for the bundled models (``resources/companions/<model>/``, each
with its MODEL_CARD.md): a DFlash2 drafter and an MTP head for Qwen2.5-Coder-0.5B-Instruct (the
demo) and for SmolLM2-135M-Instruct.

``NO_DRAFTER`` asks for no drafter even where one is shipped (the app's "No drafter").

Used by default wherever a target has no drafter or MTP head of its own: the app and the CLI
run speculative decoding offline out of the box. Matched on the folder name (or, for a copy
quantized here, its source's) and on the shapes the pair was trained against, so a different
model that happens to share the name is not given a drafter that does not fit it (loading
would refuse it anyway, with the reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine_mlx.models.loading import ModelSpec
from engine_mlx.models.quantize import quantized_source

COMPANIONS_DIR = Path(__file__).resolve().parent.parent / "resources" / "companions"
DRAFTER_SUFFIX = "-DFlash2"  # the drafter's folder: <model>-DFlash2 (as z-lab names theirs)
MTP_FILE = "mtp.safetensors"
NO_DRAFTER = "none"
# name -> (hidden size, vocabulary, layers) the shipped pair was trained for
TRAINED_FOR = {
    "Qwen2.5-Coder-0.5B-Instruct": (896, 151936, 24),
    "SmolLM2-135M-Instruct": (576, 49152, 30),
}


@dataclass(frozen=True)
class Companions:
    drafter: Path | None = None
    mtp: Path | None = None


def shipped_companions(spec: ModelSpec) -> Companions:
    """The shipped drafter and MTP head for this target, where they exist and fit."""
    name = quantized_source(spec.path) or spec.name  # a quantized copy keeps its pair
    shape = TRAINED_FOR.get(name)
    if shape != (spec.hidden_size, spec.vocab_size, spec.num_layers):
        return Companions()
    folder = COMPANIONS_DIR / name
    drafter = folder / f"{name}{DRAFTER_SUFFIX}"
    mtp = folder / MTP_FILE
    return Companions(
        drafter=drafter if (drafter / "config.json").is_file() else None,
        mtp=mtp if mtp.is_file() else None,
    )
