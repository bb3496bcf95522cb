"""The CPU SwiGLU path (numpy exp) equals mlx-lm's, and only the engine's forward takes it."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load as mlx_lm_load
from mlx_lm.models.activations import swiglu as mlx_lm_swiglu
from mlx_lm.models.cache import make_prompt_cache

from engine_mlx.config import GenerationConfig
from engine_mlx.models import swiglu
from engine_mlx.session import Session


def test_numpy_swiglu_equals_mlx_lms_including_saturated_gates():
    rng = np.random.default_rng(0)
    gate = rng.standard_normal((3, 257), dtype=np.float32) * 8
    gate[0, :4] = [-1000.0, -90.0, 90.0, 1000.0]  # exp overflows / underflows
    up = rng.standard_normal((3, 257), dtype=np.float32)
    with np.errstate(all="raise"):
        ours = swiglu.numpy_swiglu(mx.array(gate), mx.array(up))
    ref = mlx_lm_swiglu(mx.array(gate), mx.array(up))
    assert mx.allclose(ours, ref, atol=1e-5, rtol=1e-5).item()


@pytest.fixture
def counted_numpy_swiglu(monkeypatch):
    """The numpy path for every gate, however small, counting its calls."""
    calls = []
    real = swiglu.numpy_swiglu
    monkeypatch.setattr(swiglu, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(swiglu, "numpy_swiglu", lambda g, u: calls.append(1) or real(g, u))
    return calls


@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen3_5"])
def test_forward_with_numpy_swiglu_equals_mlx_lm(
    arch, tiny_target, tiny_model_dir, counted_numpy_swiglu
):
    target = tiny_target(arch)
    ref, tok = mlx_lm_load(str(tiny_model_dir(arch)))
    ref.set_dtype(mx.float32)
    ids = mx.array(tok.encode("The quick brown fox jumps"))
    expected = ref(ids[None], cache=make_prompt_cache(ref))
    assert not counted_numpy_swiglu  # mlx-lm's own forward kept mlx-lm's activation
    logits = target.forward(ids, target.make_cache()).logits
    assert counted_numpy_swiglu  # the engine's took the numpy path
    assert mx.allclose(logits, expected, atol=1e-4).item()


def test_speculation_is_lossless_when_only_verification_takes_the_numpy_path(
    tiny_target, monkeypatch
):
    from engine_mlx.decoding.dflash_drafter import DFlashDrafter
    from tests.support.drafters import random_dflash

    target = tiny_target("qwen3")
    width = target.layers[0].mlp.gate_proj.weight.shape[0]
    monkeypatch.setattr(swiglu, "MIN_ELEMENTS", width + 1)  # one row: MLX; two or more: numpy
    ids = target.tokenizer.encode("Hello world, the quick brown fox")
    config = GenerationConfig(max_tokens=30, ignore_eos=True)
    plain = list(Session(target).generate(ids, config))[-1].tokens
    session = Session(target, DFlashDrafter(random_dflash(target), target))
    for width_ in (1, 4):
        spec = GenerationConfig(max_tokens=30, ignore_eos=True, mode="dflash2", width=width_)
        assert list(session.generate(ids, spec))[-1].tokens == plain
