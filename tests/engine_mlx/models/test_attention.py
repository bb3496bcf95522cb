"""The CPU attention path (numpy softmax) equals MLX's fused attention."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load as mlx_lm_load
from mlx_lm.models.cache import make_prompt_cache

from engine_mlx.config import GenerationConfig
from engine_mlx.models import attention
from engine_mlx.session import Session


@pytest.mark.parametrize(
    ("heads", "kv", "length", "keys"),
    [(9, 3, 1, 700), (4, 4, 16, 40), (8, 2, 57, 300), (2, 1, 5, 5)],
)
@pytest.mark.parametrize("mask_kind", ["none", "causal", "tree"])
def test_numpy_softmax_attention_equals_fused(heads, kv, length, keys, mask_kind):
    rng = np.random.default_rng(0)
    q = mx.array(rng.standard_normal((1, heads, length, 16), dtype=np.float32))
    k = mx.array(rng.standard_normal((1, kv, keys, 16), dtype=np.float32))
    v = mx.array(rng.standard_normal((1, kv, keys, 16), dtype=np.float32))
    mask: object = None
    ref_mask: object = None
    if mask_kind == "causal":
        mask = ref_mask = "causal"
    elif mask_kind == "tree":
        allowed = rng.random((length, keys)) < 0.6
        allowed[:, 0] = True  # every query sees something
        mask, ref_mask = mx.array(allowed), mx.array(allowed)
    if mask_kind == "causal" and length > keys:
        pytest.skip("more queries than keys")
    ours = attention.numpy_softmax_attention(q, k, v, 0.25, mask)
    ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=ref_mask)
    assert mx.allclose(ours, ref, atol=1e-5).item()
    if isinstance(mask, mx.array):
        pre = attention.numpy_softmax_attention(q, k, v, 0.25, attention.to_additive(mask))
        assert mx.allclose(pre, ref, atol=1e-5).item()


@pytest.fixture
def numpy_path_everywhere(monkeypatch):
    """Take the numpy path for every attention call, however small."""
    monkeypatch.setattr(attention, "MIN_SCORES", 0)


@pytest.mark.parametrize("arch", ["llama", "qwen3_5"])
def test_forward_with_numpy_attention_equals_mlx_lm(
    arch, tiny_target, tiny_model_dir, numpy_path_everywhere
):
    target = tiny_target(arch)
    ref, tok = mlx_lm_load(str(tiny_model_dir(arch)))
    ref.set_dtype(mx.float32)
    ids = mx.array(tok.encode("The quick brown fox jumps"))
    c1, c2 = target.make_cache(), make_prompt_cache(ref)
    assert mx.allclose(target.forward(ids, c1).logits, ref(ids[None], cache=c2), atol=1e-4)
    step = mx.array([9])
    assert mx.allclose(target.forward(step, c1).logits, ref(step[None], cache=c2), atol=1e-4)


def test_speculation_with_numpy_attention_is_lossless(tiny_target, numpy_path_everywhere):
    from engine_mlx.decoding.dflash_drafter import DFlashDrafter
    from tests.support.drafters import random_dflash

    target = tiny_target("qwen3")
    ids = target.tokenizer.encode("Hello world, the quick brown fox")
    config = GenerationConfig(max_tokens=30, ignore_eos=True)
    plain = list(Session(target).generate(ids, config))[-1].tokens
    session = Session(target, DFlashDrafter(random_dflash(target), target))
    for width in (1, 4):
        spec_config = GenerationConfig(max_tokens=30, ignore_eos=True, mode="dflash2", width=width)
        assert list(session.generate(ids, spec_config))[-1].tokens == plain


def test_the_drafters_proposal_takes_the_numpy_path_and_keeps_its_logits(tiny_target, monkeypatch):
    from engine_mlx.decoding.dflash_drafter import DFlashDrafter
    from tests.support.drafters import random_dflash

    target = tiny_target("qwen3")
    drafter = DFlashDrafter(random_dflash(target), target)
    ids = target.tokenizer.encode("Hello world, the quick brown fox jumps over the lazy dog")
    out = target.forward(mx.array(ids), target.make_cache(), capture=drafter.capture_layers)
    drafter.observe(ids, out.features)
    monkeypatch.setattr(attention, "MIN_SCORES", 10**9)  # fused everywhere
    fused = drafter.block_logits(ids[-1], 5)
    calls = []
    real = attention.numpy_softmax_attention
    monkeypatch.setattr(attention, "MIN_SCORES", 0)
    monkeypatch.setattr(
        attention, "numpy_softmax_attention", lambda *a: calls.append(1) or real(*a)
    )
    numpy_path = drafter.block_logits(ids[-1], 5)
    assert len(calls) == len(drafter.model.layers)
    assert mx.allclose(numpy_path, fused, atol=1e-4).item()
