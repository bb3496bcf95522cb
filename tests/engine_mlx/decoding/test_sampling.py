"""Sampling: seeds reproduce, each filter keeps exactly the mass it should, and the repetition
penalty touches the context's tokens and nothing else."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_mlx.decoding.sampling import Sampler, SamplingParams, filtered_logprobs
from tests.support.params import cpu_path_only

# Logits at least 0.1 apart: with (near-)ties at the top-p boundary either token is a correct
# choice, so the expected set would be ambiguous.
logit_lists = st.lists(st.integers(-80, 80), min_size=2, max_size=40, unique=True).map(
    lambda xs: [x / 10 for x in xs]
)


def _draw(params: SamplingParams, logits: mx.array, n: int = 40) -> list[int]:
    sampler = Sampler(params)
    return [sampler.sample(logits).item() for _ in range(n)]


def test_seed_reproduces_and_differs():
    logits = mx.array([0.5, 0.4, 0.3, 0.2, 0.1, 0.0])
    a = _draw(SamplingParams(temperature=1.0, seed=7), logits)
    b = _draw(SamplingParams(temperature=1.0, seed=7), logits)
    c = _draw(SamplingParams(temperature=1.0, seed=8), logits)
    assert a == b
    assert a != c


def test_greedy_is_argmax():
    logits = mx.array([[0.1, 3.0, 2.9], [5.0, 0.0, -1.0]])
    assert Sampler(SamplingParams()).sample(logits).tolist() == [1, 0]
    assert mx.exp(Sampler(SamplingParams()).logprobs(logits)).tolist() == [[0, 1, 0], [1, 0, 0]]


@settings(max_examples=60, deadline=None)
@given(logit_lists, st.floats(0.05, 0.99))
def test_top_p_keeps_smallest_prefix_reaching_p(values, top_p):
    logits = np.array(values, dtype=np.float32)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    kept = np.exp(np.array(filtered_logprobs(mx.array(logits), SamplingParams(1.0, top_p=top_p))))
    order = np.argsort(-probs)
    mass_before = np.cumsum(probs[order]) - probs[order]
    expected = set(order[mass_before < top_p].tolist())
    assert set(np.nonzero(kept > 0)[0].tolist()) == expected
    assert probs[list(expected)].sum() >= top_p - 1e-5
    np.testing.assert_allclose(kept.sum(), 1.0, rtol=1e-5)
    # The kept tokens keep their relative probabilities.
    idx = list(expected)
    np.testing.assert_allclose(kept[idx], probs[idx] / probs[idx].sum(), rtol=1e-4, atol=1e-7)


@settings(max_examples=40, deadline=None)
@given(logit_lists, st.integers(1, 10))
def test_top_k_keeps_k(values, k):
    kept = np.array(filtered_logprobs(mx.array(values), SamplingParams(1.0, top_k=k)))
    assert np.isfinite(kept).sum() == min(k, len(values))
    top = set(np.argsort(-np.array(values))[:k].tolist())
    assert set(np.nonzero(np.isfinite(kept))[0].tolist()) == top


def test_min_p_and_temperature():
    logits = mx.log(mx.array([0.5, 0.3, 0.15, 0.05]))
    kept = np.exp(np.array(filtered_logprobs(logits, SamplingParams(1.0, min_p=0.2))))
    assert (kept > 0).tolist() == [True, True, True, False]  # 0.05 < 0.2 * 0.5
    hot = np.exp(np.array(filtered_logprobs(logits, SamplingParams(2.0))))
    assert hot[3] > 0.05  # a higher temperature flattens


@pytest.mark.slow
def test_sampled_frequencies_match_distribution():
    logits = mx.array([1.0, 0.0, -1.0])
    draws = np.array(_draw(SamplingParams(temperature=1.0, seed=1), logits, n=3000))
    freq = np.bincount(draws, minlength=3) / len(draws)
    expected = np.exp([1.0, 0.0, -1.0]) / np.exp([1.0, 0.0, -1.0]).sum()
    np.testing.assert_allclose(freq, expected, atol=0.03)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -1},
        {"top_p": 0.0},
        {"top_k": -2},
        {"min_p": 1.0},
        {"repetition_penalty": 0.0},
        {"repetition_penalty": 11.0},
    ],
)
def test_invalid_params(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(1, 64),
    st.floats(0.05, 1.0),
    st.sampled_from([0.0, 0.05, 0.3]),
)
def test_top_k_with_top_p_and_min_p_is_the_reference_filter_over_a_large_vocabulary(
    seed, k, top_p, min_p
):
    """The k best by partition, then top-p and min-p over those k: the same kept set and
    probabilities as the filters applied in order over the whole vocabulary."""
    logits = np.random.default_rng(seed).normal(0, 3, size=(3, 5000)).astype(np.float32)
    params = SamplingParams(0.7, top_k=k, top_p=top_p, min_p=min_p)
    got = np.exp(np.array(filtered_logprobs(mx.array(logits), params)))
    for row, probs_row in zip(logits, got, strict=True):
        x = row / 0.7
        order = np.argsort(-x)[:k]
        p = np.exp(x[order] - x[order].max())
        p /= p.sum()
        mass_before = np.cumsum(p) - p
        keep = mass_before < top_p
        if min_p > 0:
            keep &= p >= p.max() * min_p
        expected = np.zeros_like(row)
        expected[order[keep]] = p[keep] / p[keep].sum()
        np.testing.assert_allclose(probs_row, expected, rtol=1e-4, atol=1e-6)


def test_the_repetition_penalty_scales_the_contexts_tokens_toward_zero_once():
    sampler = Sampler(SamplingParams(repetition_penalty=2.0))
    logits = mx.array([[4.0, -4.0, 4.0, -4.0, 1.0]] * 3)
    assert sampler.adjusted(logits).tolist() == logits.tolist()  # nothing in the context yet
    sampler.remember([0, 1, 1])  # twice is once
    extra = mx.array([[0, 0], [2, 0], [3, 2]])  # per row: tokens before it, not committed
    assert sampler.adjusted(logits, extra).tolist() == [
        [2.0, -8.0, 4.0, -4.0, 1.0],
        [2.0, -8.0, 2.0, -4.0, 1.0],
        [2.0, -8.0, 2.0, -8.0, 1.0],
    ]
    sampler.remember([4])
    assert sampler.adjusted(logits[0]).tolist() == [2.0, -8.0, 4.0, -4.0, 0.5]
    off = Sampler(SamplingParams())
    off.remember([0, 1, 2, 3, 4])
    assert off.adjusted(logits).tolist() == logits.tolist()


@cpu_path_only
def test_picks_draw_a_row_only_when_read_and_row_zero_as_sample_draws_it(monkeypatch):
    """A verification walk reads the rows on its path; the others are never filtered. Row 0
    read first takes the same uniform as ``sample``'s first row, so it is the same token."""
    from engine_mlx.cpu import sampler as host_module

    if host_module.host_sampler() is None:
        pytest.skip("the C filters do not build here")
    params = SamplingParams(temperature=0.7, top_k=20, top_p=0.8, seed=11, repetition_penalty=1.05)
    logits = mx.array(np.random.default_rng(3).normal(size=(8, 500)).astype(np.float32))
    expected = Sampler(params).sample(logits).tolist()
    rows_filtered: list[int] = []
    run = host_module.HostSampler.run

    def counted(self, x, *args, **kwargs):
        rows_filtered.append(len(x))
        return run(self, x, *args, **kwargs)

    monkeypatch.setattr(host_module.HostSampler, "run", counted)
    picks = Sampler(params).picks(logits)
    assert len(picks) == 8 and rows_filtered == []
    assert picks[0] == expected[0]
    assert picks[5] == picks[5] and picks[-1] == picks[7]  # each row is drawn once
    assert rows_filtered == [1, 1, 1]
    assert all(0 <= t < 500 for t in picks[0:8])
    assert len(rows_filtered) == 8


def test_picks_follow_the_filters_distribution():
    """Row by row, on read, the frequencies are the filtered distribution's."""
    params = SamplingParams(temperature=1.0, top_k=3, seed=5)
    row = [2.0, 1.5, 1.0, 0.5, -1.0]
    logits = mx.array([row, row[::-1]], dtype=mx.float32)
    sampler = Sampler(params)
    counts = np.zeros((2, 5))
    for _ in range(4000):
        picks = sampler.picks(logits)
        counts[1, picks[1]] += 1
        counts[0, picks[0]] += 1
    expected = np.exp(np.array(sampler.logprobs(logits)))
    assert np.abs(counts / 4000 - expected).max() < 0.03
