"""Train a small standalone draft LM: the baseline for mlx-lm's own speculative loop.

mlx-lm's ``stream_generate(draft_model=...)`` needs a complete causal LM with the target's
vocabulary, and none is published for the demo target, so one is trained here on the same
dataset as the DFlash2 drafter (a fair comparison: same data, same teacher). It is the
target's own architecture cut to ``layers`` layers — the first and the last ones, copied from
the target, with its embeddings, final norm and head — written as an ordinary mlx-lm model
folder and loaded with mlx-lm, then distilled on the target's top-k distribution at every
continuation position (KL, a vocabulary subset per step: ``training.vocab``).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from engine_mlx.models.target import TargetModel
from engine_mlx.training.dataset import load_fields
from engine_mlx.training.progress import check_finite, checkpoint_record, top1_agreement
from engine_mlx.training.vocab import renormalised, subset, weighted_kl

HISTORY_FILE = "train_history.json"
_KEPT_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class DraftLMTrainConfig:
    steps: int = 300
    layers: int = 2
    lr: float = 3e-4
    sequences: int = 8  # whole sequences per step
    vocab_sample: int = 2048  # random extra tokens scored per step; 0 = the full vocabulary
    seed: int = 0
    checkpoint_every: int = 50


@dataclass
class LMBatch:
    tokens: mx.array  # [S, T]
    first: int  # the first position whose next token is a continuation token
    teacher_ids: mx.array  # [S, T-1-first, K] (indices into ``vocab`` when set)
    teacher_p: mx.array  # [S, T-1-first, K]
    weights: mx.array  # [S, T-1-first]
    vocab: mx.array | None = None


def kept_layers(n_target: int, n_draft: int) -> list[int]:
    """The first layer and the last ``n_draft - 1``: the embedding feeds the first, the last
    ones feed the final norm and head, so the copy starts out as a (poor) language model."""
    if not 1 <= n_draft <= n_target:
        raise ValueError(f"a draft LM needs 1..{n_target} layers, not {n_draft}")
    return [0, *range(n_target - n_draft + 1, n_target)]


def new_draft_folder(target: TargetModel, out: Path, layers: int) -> None:
    """An mlx-lm model folder holding the cut-down copy of the target."""
    if target.is_hybrid:
        raise ValueError("draft LMs are built for plain attention targets only")
    source = Path(target.spec.path)
    config = json.loads((source / "config.json").read_text())
    picked = kept_layers(int(config["num_hidden_layers"]), layers)
    weights = {}
    tensors: dict[str, mx.array] = {}
    for file in sorted(source.glob("*.safetensors")):
        tensors.update(mx.load(str(file)))
    for name, value in tensors.items():
        parts = name.split(".")
        if parts[:2] == ["model", "layers"]:
            if int(parts[2]) not in picked:
                continue
            parts[2] = str(picked.index(int(parts[2])))
        weights[".".join(parts)] = value
    out.mkdir(parents=True, exist_ok=True)
    config["num_hidden_layers"] = layers
    config["flashchat_draft_lm"] = {"target": target.spec.name, "target_layers": picked}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    for name in _KEPT_FILES:
        if (source / name).exists():
            shutil.copy2(source / name, out / name)


def load_draft_lm(folder: Path) -> nn.Module:
    from mlx_lm.utils import load_model

    model, _ = load_model(folder)
    model.set_dtype(mx.float32)
    return model


def save_draft_lm(model: nn.Module, folder: Path) -> None:
    """fp16 weights in place of the folder's (written beside it, then renamed)."""
    from mlx.utils import tree_flatten

    weights = {k: v.astype(mx.float16) for k, v in tree_flatten(model.parameters())}
    tmp = folder / "model.tmp.safetensors"
    mx.save_safetensors(str(tmp), weights, metadata={"format": "mlx"})
    tmp.replace(folder / "model.safetensors")


class LMSampler:
    """Random groups of whole sequences from one shard of the dataset."""

    def __init__(self, folder: str | Path) -> None:
        self.shards = load_fields(folder, ("tokens", "lengths", "top_ids", "top_logp"))

    def sample(self, rng: np.random.Generator, sequences: int, vocab: tuple[int, int]) -> LMBatch:
        sh = self.shards[int(rng.integers(len(self.shards)))]
        n, total = sh["tokens"].shape
        rows = rng.choice(n, size=min(n, sequences), replace=False)
        first = sh["prompt_length"] - 1
        positions = np.arange(first, total - 1)  # position i predicts token i + 1
        valid = positions[None] + 1 < sh["lengths"][rows][:, None]
        scored, ids = subset(sh["top_ids"][rows, first : total - 1], vocab[0], vocab[1], rng)
        return LMBatch(
            tokens=mx.array(sh["tokens"][rows].astype(np.int32)),
            first=first,
            teacher_ids=mx.array(ids),
            teacher_p=mx.array(renormalised(sh["top_logp"][rows, first : total - 1])),
            weights=mx.array(valid.astype(np.float32)),
            vocab=None if scored is None else mx.array(scored),
        )


def _head_rows(model: nn.Module) -> mx.array:
    head = getattr(model, "lm_head", None)
    return head.weight if head is not None else model.model.embed_tokens.weight


def draft_lm_loss(model: nn.Module, batch: LMBatch) -> tuple[mx.array, mx.array]:
    """KL from the target's top-k distribution over the continuation, and the logits."""
    hidden = model.model(batch.tokens[:, :-1])[:, batch.first :]  # after the final norm
    rows = _head_rows(model)
    rows = rows if batch.vocab is None else rows[batch.vocab]
    logits = (hidden @ rows.T).astype(mx.float32)
    return weighted_kl(logits, batch.teacher_ids, batch.teacher_p, batch.weights), logits


def train_draft_lm(
    target: TargetModel,
    data: str | Path,
    out: str | Path,
    config: DraftLMTrainConfig = DraftLMTrainConfig(),
    log: Callable[[dict], None] = print,
) -> list[dict]:
    """Train (or resume) a draft LM in the folder ``out``; returns the per-step history.
    Resumes from the last checkpoint's weights (the optimizer's moments restart)."""
    out = Path(out)
    history_file = out / HISTORY_FILE
    if not history_file.exists():
        new_draft_folder(target, out, config.layers)
    history = json.loads(history_file.read_text())["history"] if history_file.exists() else []
    model = load_draft_lm(out)
    sampler = LMSampler(data)
    model.train()
    optimizer = optim.AdamW(learning_rate=config.lr, weight_decay=0.0)
    loss_and_grad = nn.value_and_grad(model, draft_lm_loss)
    t0 = time.perf_counter()
    for step in range(len(history), config.steps):
        rng = np.random.default_rng([config.seed, step])
        batch = sampler.sample(rng, config.sequences, (target.spec.vocab_size, config.vocab_sample))
        (loss, logits), grads = loss_and_grad(model, batch)
        grads, _ = optim.clip_grad_norm(grads, 1.0)
        optimizer.update(model, grads)
        mx.eval(model.parameters(), optimizer.state, loss)
        agree = top1_agreement(logits, batch.teacher_ids, batch.weights)
        history.append({"step": step + 1, "loss": float(loss), "top1": agree})
        if (step + 1) % config.checkpoint_every == 0 or step + 1 == config.steps:
            save_draft_lm(model, out)
            history_file.write_text(json.dumps({"config": asdict(config), "history": history}))
            metrics = {"loss": ("loss", 4), "top1": ("top1", 3)}
            log(checkpoint_record(history, config.checkpoint_every, t0, metrics))
        check_finite(loss, step + 1)
    model.eval()
    return history
