"""Candidate building: top-k per block position and the selector's path scores."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.decoding.selector import AcceptanceCalibrator
from engine_mlx.kernels import candidates


@pytest.mark.parametrize(
    ("rows", "vocab", "k", "dtype"),
    [
        (7, 1000, 4, mx.float32),
        (15, 517, 8, mx.float16),
        (3, 300, 1, mx.bfloat16),
        (2, 3, 8, mx.float32),  # fewer tokens than k: k becomes the vocabulary size
    ],
    ids=["f32", "f16-k8-odd-vocab", "bf16-k1", "tiny-vocab"],
)
def test_topk_equals_reference(executor, rows, vocab, k, dtype):
    rng = np.random.default_rng(vocab)
    logits = mx.array(rng.standard_normal((rows, vocab), dtype=np.float32) * 3).astype(dtype)
    tokens, probs = candidates.kernel_topk(logits, k, executor)
    ref_tokens, ref_probs = candidates.reference_topk(logits, k)
    assert tokens.tolist() == ref_tokens.tolist()
    assert mx.allclose(probs, ref_probs, rtol=1e-5, atol=1e-7).item()


def test_topk_ties_and_the_drafters_proposal(executor):
    """Ties go to the lowest id; the probabilities are the drafter's softmax ones."""
    logits = mx.array([[1.0, 4.0, 4.0, -2.0, 4.0, 0.5], [0.0] * 6])
    tokens, probs = candidates.kernel_topk(logits, 4, executor)
    assert tokens.tolist() == [[1, 2, 4, 0], [0, 1, 2, 3]]
    soft = mx.softmax(logits, axis=-1)
    assert mx.allclose(probs, mx.take_along_axis(soft, tokens, axis=-1), atol=1e-7).item()


def test_topk_empty(executor):
    tokens, probs = candidates.kernel_topk(mx.zeros((0, 10)), 3, executor)
    assert tokens.shape == probs.shape == (0, 3)


def calibrated(rng, max_depth: int, bins: int) -> AcceptanceCalibrator:
    cal = AcceptanceCalibrator(bins=bins, max_depth=max_depth)
    hits, trials = cal._arrays("dflash2")
    trials[...] = rng.integers(0, 40, trials.shape)
    hits[...] = np.minimum(trials, rng.integers(0, 40, trials.shape))
    return cal


@pytest.mark.parametrize(("rows", "k", "max_depth"), [(15, 4, 32), (9, 8, 5), (1, 1, 32)])
def test_path_scores_equal_reference_and_the_calibrator(executor, rows, k, max_depth):
    rng = np.random.default_rng(rows * k)
    cal = calibrated(rng, max_depth, bins=10)
    probs = -np.sort(-rng.dirichlet(np.ones(20), rows)[:, :k], axis=1).astype(np.float32)
    hits, trials = (mx.array(a) for a in cal._arrays("dflash2"))
    accept, score = candidates.kernel_path_scores(mx.array(probs), hits, trials, 4.0, executor)
    ref_accept, ref_score = candidates.reference_path_scores(mx.array(probs), hits, trials, 4.0)
    assert mx.allclose(accept, ref_accept, rtol=1e-6).item()
    assert mx.allclose(score, ref_score, rtol=1e-5).item()
    engine = np.array(
        [[cal.estimate("dflash2", d + 1, float(p)) for p in row] for d, row in enumerate(probs)]
    )
    assert np.allclose(np.asarray(accept), engine, rtol=1e-5)
    chain = np.concatenate([[1.0], np.cumprod(engine[:-1, 0])])
    assert np.allclose(np.asarray(score), chain[:, None] * engine, rtol=1e-4)
