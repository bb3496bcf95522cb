"""Scoring a vocabulary subset gives the same logits as the full head at those tokens."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine_mlx.training.vocab import distill_kl, logits_over, renormalised, subset


def test_subset_logits_match_the_full_head(tiny_target):
    for arch in ("llama", "qwen2"):  # untied and tied heads
        target = tiny_target(arch)
        rng = np.random.default_rng(0)
        teacher = rng.integers(0, target.spec.vocab_size, size=(3, 4))
        scored, index = subset(teacher, target.spec.vocab_size, 16, rng)
        np.testing.assert_array_equal(scored[index], teacher)
        hidden = mx.random.normal((3, target.spec.hidden_size))
        full = np.array(logits_over(target, hidden, None))
        part = np.array(logits_over(target, hidden, mx.array(scored)))
        np.testing.assert_allclose(part, full[:, scored], rtol=1e-5, atol=1e-5)


def test_kl_is_zero_only_when_the_student_matches():
    logp = np.log(np.array([[0.7, 0.2, 0.1]], dtype=np.float32))
    p = renormalised(logp)
    ids = mx.array([[0, 1, 2]])
    same = float(distill_kl(mx.array(logp), ids, mx.array(p))[0])
    other = float(distill_kl(mx.array(logp[:, ::-1].copy()), ids, mx.array(p))[0])
    assert abs(same) < 1e-5 and other > 0.1
