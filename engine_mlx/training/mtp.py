"""Train an MTP head for a target that has none, on the target's own distribution.

For a token sequence x, the target's final hidden states h_i and its next-token distributions
p_i come from one frozen forward. The head sees (h_i, x_{i+1}) and must predict the token
after x_{i+1}; its loss is the cross-entropy against the target's own distribution p_{i+1}
there, as a KL divergence (distillation: the head is judged on what the target will accept,
not on the corpus).
Only the head's parameters train; the target's embedding and head are shared and frozen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from engine_mlx.models.mtp import MTPHead, load_mtp, new_head, save_mtp
from engine_mlx.models.target import TargetModel


@dataclass(frozen=True)
class MTPTrainConfig:
    steps: int = 200
    batch: int = 4
    seq_len: int = 128
    lr: float = 1e-3
    hidden: str = "post"  # which target state the head reads (see decoding.mtp_drafter)
    seed: int = 0
    checkpoint_every: int = 50


def token_windows(
    target: TargetModel, texts: Sequence[str], seq_len: int, seed: int
) -> Iterator[np.ndarray]:
    """Endless random windows of ``seq_len + 1`` tokens from the tokenised texts."""
    ids = np.array([t for text in texts for t in target.tokenizer.encode(text)], dtype=np.int32)
    if len(ids) <= seq_len + 1:
        raise ValueError(f"need more than {seq_len + 1} tokens of training text, got {len(ids)}")
    rng = np.random.default_rng(seed)
    while True:
        start = int(rng.integers(0, len(ids) - seq_len - 1))
        yield ids[start : start + seq_len + 1]


def _targets(target: TargetModel, tokens: mx.array, hidden: str) -> tuple[mx.array, mx.array]:
    """Frozen target pass: states fed to the head, and log p of the target per position."""
    last = len(target.layers) - 1
    out = target.forward(tokens, [None] * len(target.layers), capture=(last,))
    h = out.features[0]
    if hidden == "post":
        h = target.inner.norm(h)
    return mx.stop_gradient(h), mx.stop_gradient(nn.log_softmax(out.logits.astype(mx.float32)))


def mtp_loss(head: MTPHead, target: TargetModel, tokens: mx.array, h: mx.array, logp: mx.array):
    """KL(target at i+1 || head at i): zero when the head predicts exactly what the target
    will (cross-entropy minus the target's own entropy, so the number has no floor)."""
    states = head.step(target.embed(tokens[:, 1:]), h[:, :-1], None)
    logits = target.head(head.norm(states)).astype(mx.float32)
    teacher_logp = logp[:, 1:]
    teacher = mx.exp(teacher_logp)
    return (teacher * (teacher_logp - nn.log_softmax(logits))).sum(axis=-1).mean()


def train_mtp(
    target: TargetModel,
    texts: Sequence[str],
    out: str | Path,
    config: MTPTrainConfig = MTPTrainConfig(),
    log: Callable[[dict], None] = print,
) -> list[float]:
    """Train (or resume training of) a head; writes ``out`` and ``out``.json with the losses.
    Resumes from ``out`` if it exists, so an interrupted run loses at most one interval (the
    optimizer's moments restart, which costs a few steps of warm-up)."""
    out = Path(out)
    mx.random.seed(config.seed)
    head = load_mtp(target, out) if out.exists() else new_head(target)
    history_file = out.with_suffix(".json")
    history = json.loads(history_file.read_text())["losses"] if history_file.exists() else []
    head.train()
    optimizer = optim.AdamW(learning_rate=config.lr, weight_decay=0.0)
    loss_and_grad = nn.value_and_grad(head, mtp_loss)
    windows = token_windows(target, texts, config.seq_len, config.seed + len(history))
    t0 = time.perf_counter()
    for step in range(len(history), config.steps):
        batch = mx.array(np.stack([next(windows) for _ in range(config.batch)]))
        h, logp = _targets(target, batch, config.hidden)
        loss, grads = loss_and_grad(head, target, batch, h, logp)
        optimizer.update(head, grads)
        mx.eval(head.parameters(), optimizer.state, loss)
        history.append(float(loss))
        if (step + 1) % config.checkpoint_every == 0 or step + 1 == config.steps:
            save_mtp(head, out)
            history_file.write_text(json.dumps({"losses": history, "config": config.__dict__}))
            log({"step": step + 1, "loss": float(loss), "seconds": time.perf_counter() - t0})
    head.eval()
    return history
