"""GenerationConfig.validate: every bad field is one clear error before any work."""

from __future__ import annotations

import pytest

from engine_mlx.config import GenerationConfig
from engine_mlx.errors import EngineError
from engine_mlx.modes import Mode


def test_a_good_config_names_its_mode():
    assert GenerationConfig().validate() is Mode.AR
    assert (
        GenerationConfig(mode="auto", width=8, block_size=64, mtp_steps=4).validate() is Mode.AUTO
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mode": "turbo"}, "Mode 'turbo' is not available"),
        ({"max_tokens": 0}, "max tokens"),
        ({"prefill_chunk": 0}, "prefill chunk"),
        ({"policy": "vibes"}, "policy"),
        ({"mtp_steps": 5}, "MTP steps"),
        ({"width": 9}, "draft width"),
        ({"width": 0}, "draft width"),
        ({"block_size": 1}, "block size"),
        ({"block_size": 65}, "block size"),
    ],
)
def test_a_bad_field_is_named(fields, message):
    with pytest.raises(EngineError, match=message):
        GenerationConfig(**fields).validate()
