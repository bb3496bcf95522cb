"""The layer-by-layer forward equals mlx-lm's, with explicit positions, masks and captures."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm import load as mlx_lm_load
from mlx_lm.models.cache import make_prompt_cache

from tests.conftest import ARCHS

PROMPT = "Speculative decoding drafts tokens; the target verifies them."


def _max_diff(a: mx.array, b: mx.array) -> float:
    return mx.abs(a.astype(mx.float32) - b.astype(mx.float32)).max().item()


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_equals_mlx_lm(arch, tiny_target, tiny_model_dir):
    target = tiny_target(arch)
    ref, tokenizer = mlx_lm_load(str(tiny_model_dir(arch)))
    ref.set_dtype(target.dtype)
    ids = mx.array(tokenizer.encode(PROMPT))
    ours_cache, ref_cache = target.make_cache(), make_prompt_cache(ref)
    ours = target.forward(ids, ours_cache).logits
    theirs = ref(ids[None], cache=ref_cache)
    assert ours.shape == theirs.shape
    assert _max_diff(ours, theirs) < 1e-5
    for token in (5, 17, 42):  # decode steps on the filled caches
        step = mx.array([token])
        assert _max_diff(target.forward(step, ours_cache).logits, ref(step[None], ref_cache)) < 1e-5
    assert target.cache_length(ours_cache) == ids.size + 3


@pytest.mark.parametrize("arch", ARCHS)
def test_captured_layers_are_the_requested_ones(arch, tiny_target):
    target = tiny_target(arch)
    ids = mx.array(target.tokenizer.encode(PROMPT))
    last = len(target.layers) - 1
    out = target.forward(ids, target.make_cache(), capture=(0, last))
    assert [f.shape for f in out.features] == [(1, ids.size, target.spec.hidden_size)] * 2
    # Layer 0's output: the first layer applied to the embeddings, nothing more.
    cache = target.make_cache()
    h0 = target.layers[0](
        target.embed(ids[None]), "causal" if not target.is_hybrid else None, cache[0]
    )
    assert _max_diff(out.features[0], h0) < 1e-5
    # The last captured output, normed and projected, is exactly the logits.
    assert _max_diff(target.head(target.inner.norm(out.features[1])), out.logits) < 1e-5


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_explicit_positions_and_tree_mask_equal_sequential_decoding(arch, tiny_target):
    """Two branches verified in one forward give each branch's sequential logits."""
    target = tiny_target(arch)
    prefix = target.tokenizer.encode(PROMPT)
    branch_a, branch_b = [11, 12, 13], [21, 22]
    n = len(prefix)
    expected = {}
    for name, branch in (("a", branch_a), ("b", branch_b)):
        cache = target.make_cache()
        target.forward(mx.array(prefix), cache)
        expected[name] = target.forward(mx.array(branch), cache).logits[0]

    cache = target.make_cache()
    target.forward(mx.array(prefix), cache)
    tree = branch_a + branch_b
    positions = mx.array([n, n + 1, n + 2, n, n + 1])
    parents = [-1, 0, 1, -1, 3]
    allowed = [[True] * n + [False] * len(tree) for _ in tree]
    for i in range(len(tree)):
        j = i
        while j >= 0:
            allowed[i][n + j] = True
            j = parents[j]
    out = target.forward(mx.array(tree), cache, positions=positions, mask=mx.array(allowed))
    assert _max_diff(out.logits[0, :3], expected["a"]) < 1e-4
    assert _max_diff(out.logits[0, 3:], expected["b"]) < 1e-4


@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen2"])
def test_trim_round_trip(arch, tiny_target):
    target = tiny_target(arch)
    cache = target.make_cache()
    target.forward(mx.array(target.tokenizer.encode(PROMPT)), cache)
    depth = target.cache_length(cache)
    first = target.forward(mx.array([7, 8, 9]), cache).logits
    target.trim(cache, 3)
    assert target.cache_length(cache) == depth
    again = target.forward(mx.array([7, 8, 9]), cache).logits
    assert _max_diff(first, again) == 0.0
    other = target.forward(mx.array([3]), target.make_cache()).logits
    assert _max_diff(first[:, :1], other) > 0  # the check above could fail


@pytest.mark.parametrize("arch", ARCHS)
def test_snapshot_restore_round_trip(arch, tiny_target):
    """Includes the GatedDeltaNet recurrent and conv state of the hybrid qwen3_5."""
    target = tiny_target(arch)
    cache = target.make_cache()
    target.forward(mx.array(target.tokenizer.encode(PROMPT)), cache)
    snap = target.snapshot(cache)
    first = target.forward(mx.array([7, 8, 9]), cache).logits
    target.forward(mx.array([1, 2]), cache)  # wander further
    target.restore(cache, snap)
    again = target.forward(mx.array([7, 8, 9]), cache).logits
    assert _max_diff(first, again) == 0.0


def test_hybrid_cache_refuses_trim(tiny_target):
    target = tiny_target("qwen3_5")
    cache = target.make_cache()
    target.forward(mx.array([1, 2, 3]), cache)
    assert target.is_hybrid and not target.can_trim(cache)
    with pytest.raises(ValueError, match="snapshot"):
        target.trim(cache, 1)
