"""The row-by-row attention: softmax attention within float rounding, and a row's bits the same
whether its keys sit contiguously (plain decoding) or among other slots (a tree's verification),
whatever the rows beside it; in every build this CPU can run."""

from __future__ import annotations

import numpy as np
import pytest

from engine_mlx.cpu.exact_attention import ExactAttention
from tests.engine_mlx.cpu.builds import NEEDS, skip_unless_runnable


@pytest.fixture(scope="module", params=["native", *NEEDS])
def exact(request) -> ExactAttention:
    """The native build (the engine's), and each other one: AVX-512, AVX2 and SSE code."""
    if request.param != "native":
        skip_unless_runnable(request.param)
    return ExactAttention(request.param)


def _reference(q, k, v, allowed, scale):
    heads, group = q.shape[1], q.shape[1] // k.shape[0]
    out = np.empty(q.shape, np.float64)
    for r, keys in enumerate(allowed):
        for h in range(heads):
            s = k[h // group][keys].astype(np.float64) @ q[r, h] * scale
            p = np.exp(s - s.max())
            out[r, h] = (p / p.sum()) @ v[h // group][keys]
    return out


@pytest.mark.parametrize("d", [16, 64, 128])
def test_it_is_softmax_attention(exact, d):
    rng = np.random.default_rng(d)
    q = rng.standard_normal((3, 4, d)).astype(np.float32)
    k, v = (rng.standard_normal((2, 50, d)).astype(np.float32) for _ in range(2))
    allowed = [np.arange(20, dtype=np.int32), np.array([0, 3, 7, 49], np.int32), np.arange(50)]
    got = exact.attend(q, k, v, allowed, d**-0.5)
    np.testing.assert_allclose(got, _reference(q, k, v, allowed, d**-0.5), rtol=2e-5, atol=2e-6)


def test_a_rows_bits_do_not_depend_on_where_its_keys_sit(exact):
    """Verification: the prompt, then a tree whose nodes are stored in tree order; the row of a
    node at depth 2 attends to the prompt and its two ancestors. Plain decoding: the same keys
    stored one after another. Both rows come out the same bits."""
    rng = np.random.default_rng(1)
    d, prompt = 64, 37
    k, v = (rng.standard_normal((2, 48, d)).astype(np.float32) for _ in range(2))
    q = rng.standard_normal((6, 8, d)).astype(np.float32)
    path = [prompt + 0, prompt + 2, prompt + 5]  # a root, a node, its child (other branches)
    in_tree = [*range(prompt), *path]
    tree = exact.attend(q, k, v, [np.arange(5), np.array(in_tree, np.int32)] * 3, 0.125)
    contiguous_k, contiguous_v = k[:, in_tree].copy(), v[:, in_tree].copy()
    alone = exact.attend(q[1:2], contiguous_k, contiguous_v, [np.arange(len(in_tree))], 0.125)
    assert np.array_equal(tree[1], alone[0])
    strided = np.zeros((2, 80, d), np.float32)[:, :48]  # a cache buffer larger than its use
    strided[:] = k
    again = exact.attend(q, strided, v, [np.arange(5), np.array(in_tree, np.int32)] * 3, 0.125)
    assert np.array_equal(again, tree)


def test_threads_share_the_rows_without_changing_a_bit(exact):
    from engine_mlx import blas

    rng = np.random.default_rng(2)
    q = rng.standard_normal((5, 14, 64)).astype(np.float32)
    k, v = (rng.standard_normal((2, 700, 64)).astype(np.float32) for _ in range(2))
    allowed = [np.arange(600 + r, dtype=np.int32) for r in range(5)]
    alone = exact.attend(q, k, v, allowed, 0.125)
    small = blas.small_gemm()
    if small is None:
        pytest.skip("no thread pool here (the float32 product did not build)")
    exact.use_pool(small.library)
    assert np.array_equal(exact.attend(q, k, v, allowed, 0.125, threads=2), alone)


def test_new_rows_read_where_they_are_give_the_same_bits(exact):
    """A forward's own keys and values, read from where they were computed (slots from the
    split on) before the cache holds them: the bits of attending to the filled cache."""
    rng = np.random.default_rng(3)
    d, cached, new = 64, 30, 4
    k, v = (rng.standard_normal((2, cached + new, d)).astype(np.float32) for _ in range(2))
    q = rng.standard_normal((new, 6, d)).astype(np.float32)
    allowed = [np.arange(cached + r + 1, dtype=np.int32) for r in range(new)]
    whole = exact.attend(q, k, v, allowed, 0.125)
    buffer = np.zeros((2, 64, d), np.float32)[:, :cached]  # a cache with room, rows not yet in
    buffer[:] = k[:, :cached]
    values = v[:, :cached].copy()
    split = exact.attend(
        q, buffer, values, allowed, 0.125, new=(k[:, cached:], v[:, cached:], cached)
    )
    assert np.array_equal(split, whole)
