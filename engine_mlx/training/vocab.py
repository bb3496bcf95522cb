"""Scoring a subset of the vocabulary during training.

The target's head is most of a drafter's training step (49k tokens x hidden for SmolLM2, and
as many exponentials per prediction). The teachers' top-k tokens carry nearly all of the
distillation signal; adding a few thousand random tokens per step keeps every other token's
logit pushed down over the run. Evaluation always uses the full head.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine_mlx.models.target import TargetModel


def subset(
    teacher_ids: np.ndarray, vocab_size: int, extra: int, rng: np.random.Generator
) -> tuple[np.ndarray | None, np.ndarray]:
    """Token ids to score (sorted) and ``teacher_ids`` as indices into them; ``extra`` = 0
    scores the whole vocabulary (ids unchanged)."""
    if not extra:
        return None, teacher_ids.astype(np.int32)
    random_ids = rng.integers(0, vocab_size, size=extra)
    scored = np.unique(np.concatenate([teacher_ids.ravel(), random_ids])).astype(np.int32)
    return scored, np.searchsorted(scored, teacher_ids).astype(np.int32)


def logits_over(target: TargetModel, hidden: mx.array, scored: mx.array | None) -> mx.array:
    """fp32 logits of ``hidden`` (after the final norm) for the ``scored`` ids, or all."""
    rows = None if scored is None else target.head_rows(scored)
    if rows is not None:
        return (hidden @ rows.T).astype(mx.float32)
    logits = target.head(hidden).astype(mx.float32)
    return logits if scored is None else mx.take(logits, scored, axis=-1)


def distill_kl(logits: mx.array, teacher_ids: mx.array, teacher_p: mx.array) -> mx.array:
    """Per-position KL(teacher || student) with the teacher given as top-k indices and
    renormalised probabilities (cross-entropy less the teacher's entropy: no floor)."""
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    picked = mx.take_along_axis(logp, teacher_ids, axis=-1)
    entropy = -(teacher_p * mx.log(mx.maximum(teacher_p, 1e-12))).sum(-1)
    return -(teacher_p * picked).sum(-1) - entropy


def renormalised(top_logp: np.ndarray) -> np.ndarray:
    """Top-k log-probabilities -> probabilities summing to one over the k."""
    logp = top_logp.astype(np.float32)
    p = np.exp(logp - logp.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def weighted_kl(
    logits: mx.array, teacher_ids: mx.array, teacher_p: mx.array, weights: mx.array
) -> mx.array:
    """``distill_kl`` averaged over the positions, each counted by its weight."""
    per_position = distill_kl(logits, teacher_ids, teacher_p)
    return (per_position * weights).sum() / mx.maximum(weights.sum(), 1.0)
