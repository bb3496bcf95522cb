"""What to offer a Mac instead of the demo, a small model sized for a CPU: 4-bit Qwen3 targets
that have published DFlash2 drafters (``catalog.KNOWN_DRAFTERS``). The first-run
screen suggests the largest that fits the GPU's share of unified memory, with its sizes; the
sizes are computed from each model's architecture, not downloaded (the screen is offline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine_mlx.library.memory import estimate_memory


@dataclass(frozen=True)
class MacModel:
    """A 4-bit MLX conversion of a Qwen target that has a published DFlash2 drafter."""

    repo_id: str
    name: str
    weight_bytes: int  # parameters x 4.5 bits (4-bit weights, a float16 scale and bias per 64)
    drafter: str  # the DFlash2 drafter the library offers once the target is in
    config: dict[str, Any]  # what the memory estimate reads, as the model's config.json says

    def memory_bytes(self) -> int:
        """What it needs to run, by the estimate the library's download check applies."""
        return estimate_memory(self.config, self.weight_bytes)


def _qwen3(layers: int, vocab: int = 151936) -> dict[str, Any]:
    return {
        "num_hidden_layers": layers,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": vocab,
        "max_position_embeddings": 40960,
    }


MAC_MODELS = (  # largest first
    # Qwen3-8B: 36 layers of 4096 (MLP 12288), its own head: 8.19 billion parameters
    MacModel(
        "mlx-community/Qwen3-8B-4bit",
        "Qwen3-8B (4-bit)",
        4_610_000_000,
        "z-lab/Qwen3-8B-DFlash-b16",
        _qwen3(36),
    ),
    # Qwen3-4B: 36 layers of 2560 (MLP 9728), tied head: 4.02 billion parameters
    MacModel(
        "mlx-community/Qwen3-4B-4bit",
        "Qwen3-4B (4-bit)",
        2_260_000_000,
        "z-lab/Qwen3-4B-DFlash-b16",
        _qwen3(36),
    ),
)


MARGIN = 1000**3
"""Room left beside the target: its drafter, and what else the Mac is running."""


def mac_model_for(usable_bytes: int) -> MacModel | None:
    """The largest suggestion that runs in ``usable_bytes`` with ``MARGIN`` to spare; None
    when none does."""
    for model in MAC_MODELS:
        if model.memory_bytes() + MARGIN <= usable_bytes:
            return model
    return None
