"""Tree-verify attention: kernel == MLX reference == the engine's fused attention with the
tree's mask, over head dims, dtypes, trees and cache lengths."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.decoding.tree import CandidateTree
from engine_mlx.kernels import tree_attention

TOLERANCE = {mx.float32: 2e-5, mx.float16: 2e-3, mx.bfloat16: 1.6e-2}


def random_tree(rng: np.random.Generator, nodes: int) -> CandidateTree:
    tree = CandidateTree.rooted(1)
    while len(tree) < nodes:
        tree.add(int(rng.integers(0, len(tree))), int(rng.integers(2, 10_000)))
    return tree


def chain(nodes: int) -> CandidateTree:
    tree = CandidateTree.rooted(1)
    for token in range(2, nodes + 1):
        tree.add(len(tree) - 1, token)
    return tree


def make_inputs(rng, heads, kv_heads, dim, dtype, tree_nodes, prefix, spare=7):
    """q [1, H, L, D]; k, v: views [1, KV, N, D] of a larger cache buffer (as mlx-lm's
    KVCache hands them to attention: strided, not row-contiguous)."""
    n = prefix + tree_nodes
    q = mx.array(rng.standard_normal((1, heads, tree_nodes, dim), dtype=np.float32)).astype(dtype)
    k_buf = mx.array(rng.standard_normal((1, kv_heads, n + spare, dim), dtype=np.float32))
    v_buf = mx.array(rng.standard_normal((1, kv_heads, n + spare, dim), dtype=np.float32))
    return q, k_buf.astype(dtype)[..., :n, :], v_buf.astype(dtype)[..., :n, :]


CASES = [
    # heads, kv heads, head dim, dtype, tree, cache tokens, chunk, max SIMD groups
    pytest.param(4, 2, 64, mx.float32, "random13", 70, 32, 8, id="gqa-f32-d64-3chunks"),
    pytest.param(4, 1, 128, mx.float16, "chain5", 1, None, 8, id="f16-d128-cache1"),
    pytest.param(2, 2, 64, mx.bfloat16, "root", 33, 32, 8, id="bf16-d64-root-only"),
    pytest.param(8, 1, 64, mx.float32, "random9", 40, 64, 8, id="f32-72rows-2blocks"),
    pytest.param(6, 3, 128, mx.bfloat16, "random13", 101, 32, 2, id="bf16-d128-odd"),
]


def build_tree(rng, kind: str) -> CandidateTree:
    if kind == "root":
        return CandidateTree.rooted(1)
    if kind.startswith("chain"):
        return chain(int(kind.removeprefix("chain")))
    return random_tree(rng, int(kind.removeprefix("random")))


@pytest.mark.parametrize(
    ("heads", "kv_heads", "dim", "dtype", "tree_kind", "prefix", "chunk", "simds"), CASES
)
def test_kernel_equals_reference(
    executor, heads, kv_heads, dim, dtype, tree_kind, prefix, chunk, simds
):
    rng = np.random.default_rng(heads * 100 + prefix)
    tree = build_tree(rng, tree_kind)
    q, k, v = make_inputs(rng, heads, kv_heads, dim, dtype, len(tree), prefix)
    mask = mx.array(tree.ancestor_mask())
    scale = dim**-0.5
    ours = tree_attention.kernel(q, k, v, mask, scale, executor, chunk=chunk, max_simds=simds)
    ref = tree_attention.reference(q, k, v, mask, scale)
    assert ours.shape == ref.shape == q.shape and ours.dtype == dtype
    err = mx.abs(ours.astype(mx.float32) - ref.astype(mx.float32)).max().item()
    assert err <= TOLERANCE[dtype], err


def test_reference_is_the_engines_masked_attention():
    """The reference means what the target's verification forward computes: fused SDPA with
    the cache fully visible and the tree's ancestor mask."""
    rng = np.random.default_rng(5)
    tree = random_tree(rng, 11)
    q, k, v = make_inputs(rng, 6, 2, 64, mx.float32, len(tree), 50)
    full = tree.attention_mask(50)
    fused = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=full)
    ref = tree_attention.reference(q, k, v, mx.array(tree.ancestor_mask()), 0.125)
    assert mx.allclose(ref, fused, atol=1e-5).item()


def test_empty_tree(executor):
    q = mx.zeros((1, 4, 0, 64))
    k = v = mx.zeros((1, 2, 5, 64))
    mask = mx.zeros((0, 0), dtype=mx.bool_)
    ours = tree_attention.kernel(q, k, v, mask, 0.125, executor)
    assert ours.shape == (1, 4, 0, 64)
    assert tree_attention.reference(q, k, v, mask, 0.125).shape == (1, 4, 0, 64)


def test_default_chunks_spread_long_caches():
    assert tree_attention.default_chunk(100) == 128  # one chunk, whole tiles
    assert tree_attention.default_chunk(32_768) == 512  # 64 threadgroups per KV head
    assert tree_attention.default_chunk(1_000_000) % tree_attention.TILE == 0
