"""The step-cost calibration's contexts: as deep as asked, usable, and left as they were."""

from __future__ import annotations

import mlx.core as mx
import pytest

from engine_mlx.auto.forward_timing import synthetic_context, time_forwards


@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen3_5"])
def test_a_synthetic_context_is_as_deep_as_asked_and_a_forward_after_it_is_finite(
    tiny_target, arch
):
    target = tiny_target(arch)
    for depth in (0, 3, 300):
        cache = synthetic_context(target, depth)
        assert target.cache_length(cache) == depth
        logits = target.forward(mx.array([1, 2, 3]), cache).logits
        assert bool(mx.all(mx.isfinite(logits)).item())
        assert target.cache_length(cache) == depth + 3


@pytest.mark.parametrize("arch", ["llama", "qwen3_5"])
def test_timing_forwards_puts_the_context_back(tiny_target, arch):
    target = tiny_target(arch)
    cache = synthetic_context(target, 200)
    ms = time_forwards(target, cache, [1, 4], repeats=1)
    assert set(ms) == {1, 4} and all(v > 0 for v in ms.values())
    assert target.cache_length(cache) == 200
