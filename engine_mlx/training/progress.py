"""What every trainer reports: the averages since the last checkpoint, and a stop when the
loss is no longer a number (a diverged run should not keep writing checkpoints)."""

from __future__ import annotations

import math
import time

import mlx.core as mx


def checkpoint_record(
    history: list[dict], every: int, started: float, metrics: dict[str, tuple[str, int]]
) -> dict:
    """One log line: step, the mean of each ``history`` key over the last ``every`` steps
    (``metrics``: log name -> (history key, decimals)) and seconds since ``started``."""
    recent = history[-every:]
    record: dict = {"step": history[-1]["step"]}
    for name, (key, digits) in metrics.items():
        record[name] = round(sum(h[key] for h in recent) / len(recent), digits)
    record["seconds"] = round(time.perf_counter() - started, 1)
    return record


def top1_agreement(logits: mx.array, teacher_ids: mx.array, weights: mx.array) -> float:
    """Share of weighted positions whose argmax is the teacher's most likely token."""
    hits = (mx.argmax(logits, -1) == teacher_ids[..., 0]) * weights
    return float(hits.sum() / mx.maximum(weights.sum(), 1.0))


def past(deadline: float | None) -> bool:
    """Whether a stage with this ``time.monotonic()`` deadline should stop (None: never):
    a time-boxed run (``training.pipeline``) stops each stage after its current step."""
    return deadline is not None and time.monotonic() >= deadline


def check_finite(loss: mx.array, step: int) -> None:
    if not math.isfinite(float(loss)):
        raise ValueError(f"training diverged at step {step} (loss {float(loss)})")
