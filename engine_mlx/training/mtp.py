"""Train an MTP head for a target that has none, on the target's own distribution.

Data is a ``make-dataset`` folder: the target's continuations with its last hidden state
(before the final norm) and its top-k next-token distribution at every position. The head
sees (h_i, x_{i+1}) and must predict the token after x_{i+1}; its loss is the cross-entropy
against the target's own distribution there, minus the target's entropy (a KL, so the number
has no floor): the head is judged on what the target will accept, not on the corpus. The
head's layer attends causally over the sequence, so whole sequences train at once; the loss
counts continuation positions only. Only the head trains; the target's embedding and head are
shared and frozen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from engine_mlx.decoding.draft_vocab import DEFAULT_SIZE, continuation_counts, frequent_tokens
from engine_mlx.models.mtp import MTPHead, load_mtp, new_head, save_mtp
from engine_mlx.models.target import TargetModel
from engine_mlx.training.dataset import load_fields
from engine_mlx.training.progress import checkpoint_record, past, top1_agreement
from engine_mlx.training.vocab import logits_over, renormalised, subset, weighted_kl


@dataclass(frozen=True)
class MTPTrainConfig:
    steps: int = 600
    positions: int = 1024  # continuation positions per step (whole sequences, about)
    vocab_sample: int = 2048  # random extra tokens scored per step; 0 = full vocabulary
    lr: float = 1e-4
    hidden: str = "pre"  # the target state the head reads: measured better (decoding.mtp_drafter)
    seed: int = 0
    checkpoint_every: int = 50
    draft_vocab: int = DEFAULT_SIZE  # tokens it may propose (decoding.draft_vocab)


@dataclass
class MTPBatch:
    tokens: mx.array  # [S, T]
    hidden: mx.array  # [S, T, H] state fed to the head
    teacher_ids: mx.array  # [S, T-1, K]: row i is the teacher for token i + 2 (see vocab)
    teacher_p: mx.array  # [S, T-1, K]
    weights: mx.array  # [S, T-1]
    vocab: mx.array | None = None  # token ids scored (training.vocab); None: all


class SequenceSampler:
    """Random groups of whole sequences from one shard, sized to about ``positions``."""

    def __init__(self, folder: str | Path) -> None:
        self.shards = load_fields(folder, ("tokens", "lengths", "hidden", "top_ids", "top_logp"))

    def sample(
        self,
        rng: np.random.Generator,
        positions: int,
        target: TargetModel,
        kind: str,
        extra_vocab: int = 0,
    ) -> MTPBatch:
        sh = self.shards[int(rng.integers(len(self.shards)))]
        n, total = sh["tokens"].shape
        first = sh["prompt_length"] - 1
        per_row = max(1, total - 2 - first)
        rows = rng.choice(n, size=min(n, max(1, positions // per_row)), replace=False)
        idx = np.arange(total - 1)
        # head input i = (h_i, x_{i+1}); its teacher is row i+1 (predicts token i+2)
        valid = (idx[None] >= first) & (idx[None] + 2 < sh["lengths"][rows][:, None])
        scored, ids = subset(sh["top_ids"][rows, 1:], target.spec.vocab_size, extra_vocab, rng)
        h = mx.array(sh["hidden"][rows].astype(np.float32))
        if kind == "post":
            h = target.inner.norm(h)
        return MTPBatch(
            tokens=mx.array(sh["tokens"][rows].astype(np.int32)),
            hidden=h,
            teacher_ids=mx.array(ids),
            teacher_p=mx.array(renormalised(sh["top_logp"][rows, 1:])),
            weights=mx.array(valid.astype(np.float32)),
            vocab=None if scored is None else mx.array(scored),
        )


def mtp_loss(head: MTPHead, target: TargetModel, batch: MTPBatch) -> tuple[mx.array, mx.array]:
    """KL from the target's top-k distribution, and the head's logits."""
    states = head.step(target.embed(batch.tokens[:, 1:]), batch.hidden[:, :-1], None)
    logits = logits_over(target, head.norm(states), batch.vocab)
    return weighted_kl(logits, batch.teacher_ids, batch.teacher_p, batch.weights), logits


def starting_head(target: TargetModel) -> MTPHead:
    """A new head whose layer starts as the identity: a copy of the target's layer with its
    two output projections (attention ``o_proj``, MLP ``down_proj``) zeroed, so at step 0
    the head is the linear map ``fc`` through the output norm, and the layer's contribution
    grows from nothing. Why: the copied layer was made for embedding-scale inputs (Qwen2.5's
    embeddings have RMS 0.017, ``fc``'s output 0.58) and, left whole, wiped out what ``fc``
    carried: on one Qwen2.5-Coder-0.5B batch, 30 steps of lr 3e-4 took the KL from 8.2 to 1.4
    this way and only to 6.0 from the whole copy (lr 1e-3)."""
    head = new_head(target)
    layer = head.layers[0]
    for projection in (getattr(layer, "self_attn", None), getattr(layer, "mlp", None)):
        for name in ("o_proj", "down_proj"):
            linear = getattr(projection, name, None)
            if linear is not None:
                linear.weight = mx.zeros_like(linear.weight)
    return head


def train_mtp(
    target: TargetModel,
    data: str | Path,
    out: str | Path,
    config: MTPTrainConfig = MTPTrainConfig(),
    log: Callable[[dict], None] = print,
    deadline: float | None = None,
) -> list[dict]:
    """Train (or resume training of) a head (past ``deadline``, a ``time.monotonic()``, it
    saves and stops after the current step); writes ``out`` and ``out``.json with the history
    (loss and top-1 agreement with the target per step). Resumes from ``out`` if it exists,
    so an interruption loses at most one interval (the optimizer's moments restart, which
    costs a few steps of warm-up)."""
    out = Path(out)
    mx.random.seed(config.seed)
    head = load_mtp(target, out) if out.exists() else starting_head(target)
    history_file = out.with_suffix(".json")
    history = json.loads(history_file.read_text())["history"] if history_file.exists() else []
    sampler = SequenceSampler(data)
    vocab_size = target.spec.vocab_size
    if config.draft_vocab < vocab_size:
        counts = continuation_counts(sampler.shards, vocab_size)
        head.draft_vocab = frequent_tokens(counts, config.draft_vocab)
    else:
        head.draft_vocab = None
    head.train()
    optimizer = optim.AdamW(learning_rate=config.lr, weight_decay=0.0)
    loss_and_grad = nn.value_and_grad(head, lambda m, b: mtp_loss(m, target, b))
    t0 = time.perf_counter()
    for step in range(len(history), config.steps):
        rng = np.random.default_rng([config.seed, step])
        batch = sampler.sample(rng, config.positions, target, config.hidden, config.vocab_sample)
        (loss, logits), grads = loss_and_grad(head, batch)
        optimizer.update(head, grads)
        mx.eval(head.parameters(), optimizer.state, loss)
        agree = top1_agreement(logits, batch.teacher_ids, batch.weights)
        history.append({"step": step + 1, "loss": float(loss), "top1": agree})
        stop = past(deadline)
        if stop or (step + 1) % config.checkpoint_every == 0 or step + 1 == config.steps:
            save_mtp(head, out, reads=config.hidden)
            history_file.write_text(json.dumps({"history": history, "config": config.__dict__}))
            metrics = {"loss": ("loss", 4), "top1": ("top1", 3)}
            log(checkpoint_record(history, config.checkpoint_every, t0, metrics))
        if stop:
            break
    head.eval()
    return history
