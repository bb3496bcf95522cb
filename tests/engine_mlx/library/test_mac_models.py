"""What the first run suggests on a Mac: the largest 4-bit Qwen with a DFlash2 drafter that
runs in the GPU's share of unified memory, by the same estimate the download check applies."""

from __future__ import annotations

import pytest

from engine_mlx.library.catalog import KNOWN_DRAFTERS
from engine_mlx.library.mac_models import MAC_MODELS, MARGIN, mac_model_for

GB = 1000**3


@pytest.mark.parametrize(
    ("usable", "expected"),
    [(48 * GB, "Qwen3-8B (4-bit)"), (12 * GB, "Qwen3-8B (4-bit)"), (6 * GB, "Qwen3-4B (4-bit)"),
     (4 * GB, None)],
)  # fmt: skip
def test_the_largest_model_that_fits_is_suggested(usable, expected):
    model = mac_model_for(usable)
    assert (model.name if model else None) == expected
    if model is not None:
        assert model.memory_bytes() + MARGIN <= usable  # the hub's check lets it through


def test_each_suggestion_has_a_drafter_the_library_knows_and_its_sizes():
    known = {d.repo_id: d for d in KNOWN_DRAFTERS}
    for model in MAC_MODELS:
        drafter = known[model.drafter]
        assert model.name.startswith(drafter.trained_for)
        assert model.config["vocab_size"] == drafter.vocab_size
        assert model.config["num_hidden_layers"] == drafter.num_layers
        assert model.weight_bytes < model.memory_bytes() < 2 * model.weight_bytes
    sizes = [m.memory_bytes() for m in MAC_MODELS]
    assert sizes == sorted(sizes, reverse=True)  # largest first: the first that fits wins
