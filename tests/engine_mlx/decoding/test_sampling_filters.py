"""The sampler's two implementations against one sort-based definition: the C filters (the CPU's
path) and the MLX ops (a GPU's) keep the same tokens with the same probabilities as a plain
sort over the whole vocabulary, on random and tie-heavy logits, with the penalty over the
context and each row's own path; their draws pick exactly by that distribution."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_mlx.cpu.sampler import Filters, host_sampler
from engine_mlx.decoding import filters
from engine_mlx.decoding.sampling import Sampler, SamplingParams

BOUNDARY = 1e-5  # a filter's boundary this close to a token: float32 and float64 may disagree

needs_c = pytest.mark.skipif(host_sampler() is None, reason="the C filters did not build here")
PATHS = [pytest.param(True, id="c", marks=needs_c), pytest.param(False, id="mlx")]


def defined(row: np.ndarray, params: SamplingParams, seen: set[int]) -> tuple[np.ndarray, bool]:
    """(probabilities, ambiguous) of one row by the definition, in Hugging Face's order: the
    penalty (float32, as the model's logits are), temperature, top-k by a full sort (ties: the
    lower id), top-p (a group of equal values kept or dropped whole), min-p; float64 after the
    temperature. Ambiguous: a top-p or min-p boundary within rounding of a token."""
    x = row.astype(np.float32).copy()
    penalty = np.float32(params.repetition_penalty)
    for t in seen:
        x[t] = x[t] / penalty if x[t] > 0 else x[t] * penalty
    y = (x / np.float32(max(params.temperature, 1e-6))).astype(np.float64)
    vocab = len(y)
    order = np.lexsort((np.arange(vocab), -y))  # best first, ties by the lower id
    keep = np.ones(vocab, dtype=bool)
    if 0 < params.top_k < vocab:
        keep[:] = False
        keep[order[: params.top_k]] = True
    p = _normalised(y, keep)
    ambiguous = False
    if params.top_p < 1.0:  # each token's "above": the mass of the strictly larger values
        values, at = np.unique(y, return_inverse=True)
        mass = np.bincount(at, weights=p, minlength=len(values))
        above = (np.cumsum(mass[::-1])[::-1] - mass)[at]
        ambiguous |= bool(np.any(keep & (np.abs(above - params.top_p) < BOUNDARY)))
        keep &= above < params.top_p
    if params.min_p > 0.0:
        gap = y - y[keep].max() - math.log(params.min_p)
        ambiguous |= bool(np.any(keep & (np.abs(gap) < BOUNDARY)))
        keep &= gap >= 0
    return _normalised(y, keep), ambiguous


def _normalised(y: np.ndarray, keep: np.ndarray) -> np.ndarray:
    e = np.where(keep, np.exp(y - y[keep].max()), 0.0)
    return e / e.sum()


settings_of = st.builds(
    SamplingParams,
    temperature=st.sampled_from([0.3, 0.7, 1.0, 1.6]),
    top_k=st.sampled_from([0, 1, 2, 5, 20]),
    top_p=st.sampled_from([1.0, 0.3, 0.8, 0.95]),
    min_p=st.sampled_from([0.0, 0.05, 0.3]),
    repetition_penalty=st.sampled_from([1.0, 1.05, 1.5, 0.8]),
)


def logits_of(seed: int, rows: int, vocab: int, ties: bool) -> np.ndarray:
    """Tie-heavy: a coarse grid (ties at the top, at top-k's k-th value, inside top-p's
    groups); else normal, with a few tokens well above the rest as a model's have."""
    rng = np.random.default_rng(seed)
    if ties:
        return (rng.integers(-4, 5, size=(rows, vocab)) * 0.5).astype(np.float32)
    x = rng.normal(0, 2, size=(rows, vocab)).astype(np.float32)
    x[:, rng.integers(0, vocab, size=4)] += 6
    return x


def check_against_definition(native: bool, params, x: np.ndarray, context, extra) -> None:
    sampler = Sampler(params, native=native)
    sampler.remember(context)
    got = np.exp(np.array(sampler.logprobs(mx.array(x), mx.array(extra))))
    for row, probs, own in zip(x, got, extra.tolist(), strict=True):
        penalised = set(context) | set(own) if params.repetition_penalty != 1.0 else set()
        expected, ambiguous = defined(row, params, penalised)
        if ambiguous:
            continue
        assert np.array_equal(probs > 0, expected > 0), (params, np.nonzero(probs > 0))
        np.testing.assert_allclose(probs, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("native", PATHS)
@settings(max_examples=60, deadline=None)
@given(
    settings_of,
    st.integers(0, 2**31 - 1),
    st.integers(1, 4),
    st.integers(2, 60),
    st.booleans(),
)
def test_a_small_vocabulary_keeps_the_defined_tokens(native, params, seed, rows, vocab, ties):
    x = logits_of(seed, rows, vocab, ties)
    rng = np.random.default_rng(seed + 1)
    context = rng.integers(0, vocab, size=5).tolist()
    check_against_definition(native, params, x, context, rng.integers(0, vocab, size=(rows, 3)))


@pytest.mark.parametrize("native", PATHS)
@settings(max_examples=20, deadline=None)
@given(settings_of, st.integers(0, 2**31 - 1), st.booleans())
def test_a_large_vocabulary_keeps_the_defined_tokens(native, params, seed, ties):
    """Large enough for the two-level top-k of the MLX ops (blocks of 128 tokens) and for the
    C filters' skipped vectors; ties at the k-th value fall across blocks."""
    x = logits_of(seed, 2, 20_000, ties)
    rng = np.random.default_rng(seed + 1)
    context = rng.integers(0, 20_000, size=300).tolist()
    check_against_definition(native, params, x, context, rng.integers(0, 20_000, size=(2, 4)))


@pytest.mark.parametrize("native", PATHS)
@pytest.mark.parametrize("top_k", [0, 20])
def test_one_row_and_many_rows_keep_the_same_tokens_over_a_large_vocabulary(native, top_k):
    x = logits_of(3, 9, 49_152, ties=True)
    params = SamplingParams(0.7, top_k=top_k, top_p=0.8, repetition_penalty=1.05)
    sampler = Sampler(params, native=native)
    sampler.remember(list(range(0, 49_152, 97)))
    extra = np.arange(9 * 2, dtype=np.int32).reshape(9, 2)
    many = np.array(sampler.logprobs(mx.array(x), mx.array(extra)))
    for i in (0, 4, 8):
        alone = np.array(sampler.logprobs(mx.array(x[i]), mx.array(extra[i])))
        np.testing.assert_array_equal(alone, many[i])


def test_the_two_level_top_k_keeps_the_lowest_ids_among_ties_across_blocks():
    """Every value tied: the k kept are the first k ids, from the first blocks; a block whose
    maximum ties another's comes after it only by its position."""
    x = mx.zeros((2, 128 * 200))
    ids = np.sort(np.array(filters.top_k_indices(x, 20)), axis=-1)
    assert ids.tolist() == [list(range(20))] * 2
    y = np.zeros(128 * 200, dtype=np.float32)
    y[[5000, 9000, 300]] = 1.0  # above the ties, wherever they are
    top = set(np.array(filters.top_k_indices(mx.array(y), 5)).tolist())
    assert top == {300, 5000, 9000, 0, 1}


@needs_c
@pytest.mark.parametrize("top_k", [0, 20])
def test_the_c_draw_gives_each_token_exactly_its_probability(top_k):
    """The inverse CDF over uniforms on a fine grid: each token is picked for a share of them
    equal to its probability (within the grid's step a token), never a removed token."""
    x = logits_of(5, 1, 1000, ties=False)
    filters_ = Filters(0.7, top_k, top_p=0.9, min_p=0.01)
    host = host_sampler()
    probs = np.exp(host.run(x, filters_, dense=True).dense[0].astype(np.float64))
    n = 4000
    uniforms = ((np.arange(n) + 0.5) / n).astype(np.float32)
    tokens = host.run(np.repeat(x, n, axis=0), filters_, uniforms=uniforms).tokens
    share = np.bincount(tokens, minlength=x.shape[1]) / n
    assert np.all(share[probs == 0] == 0)
    np.testing.assert_allclose(share, probs, atol=2.0 / n)


@pytest.mark.parametrize("native", PATHS)
def test_sampled_tokens_follow_the_distribution(native):
    """Many rows of the same logits in one call: the drawn tokens' frequencies are the
    distribution's (4 standard deviations), and a removed token is never drawn."""
    x = np.tile(logits_of(2, 1, 5000, ties=False), (4000, 1))
    params = SamplingParams(1.0, top_k=8, top_p=0.9, seed=11, repetition_penalty=1.3)
    sampler = Sampler(params, native=native)
    sampler.remember([int(np.argmax(x[0]))])
    probs = np.exp(np.array(sampler.logprobs(mx.array(x[0]))).astype(np.float64))
    tokens = np.array(sampler.sample(mx.array(x)))
    share = np.bincount(tokens, minlength=x.shape[1]) / len(tokens)
    assert np.all(share[probs == 0] == 0)
    sigma = np.sqrt(probs * (1 - probs) / len(tokens))
    assert np.all(np.abs(share - probs) <= 4 * sigma + 1e-12)


@pytest.mark.parametrize("native", PATHS)
def test_a_forced_row_keeps_its_token_alone(native):
    class Force:
        def remember(self, tokens):
            pass

        def forced(self, pending):
            return 7 if pending and pending[-1] == 1 else None

    x = logits_of(4, 3, 2000, ties=True)
    sampler = Sampler(SamplingParams(0.7, top_k=20, seed=1), Force(), native=native)
    rows = [[0], [1], [2]]
    probs = np.exp(np.array(sampler.logprobs(mx.array(x), rows=rows)))
    assert np.nonzero(probs[1])[0].tolist() == [7] and (probs[[0, 2]] > 0).sum() > 2
    assert np.array(sampler.sample(mx.array(x), rows=rows)).tolist()[1] == 7
