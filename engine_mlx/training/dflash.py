"""Train a DFlash2 drafter on a dataset of the target's own continuations.

A training example is a block, exactly as at run time: context = the target's captured
features of every token before the anchor; input = ``[token at the anchor, MASK x (B-1)]`` at
positions ``anchor .. anchor+B-1``; targets = the target's next-token distributions for the
tokens after the anchor (top-k from the dataset, renormalised). Many blocks of one sequence
share its context keys/values in one attention call, masked so each block sees only its own
context prefix and itself (``DFlashAttention`` takes the packed form; drafting is the same
code with one block). The loss is the KL divergence from the teacher (its cross-entropy less the
teacher's entropy, so it has no floor), weighted by
``decay ** (j - 1)`` for block position j, since position j only pays when 1..j-1 were
accepted. Layers start as copies of the target's last layers (same shapes), which converges
much faster than a random start.

Checkpoints (the drafter folder plus ``train_state.*`` beside it) are written every
``checkpoint_every`` steps; a rerun resumes from the last one. The folder also gets the
draft vocabulary: the tokens the target generated most often in the dataset
(``decoding.draft_vocab``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from engine_mlx.decoding.draft_vocab import (
    DEFAULT_SIZE,
    continuation_counts,
    frequent_tokens,
    save_draft_vocab,
)
from engine_mlx.models.dflash import DFlashConfig, DFlashModel, load_dflash, save_dflash
from engine_mlx.models.target import TargetModel
from engine_mlx.training.dataset import dataset_capture, dataset_config, load_fields
from engine_mlx.training.progress import check_finite, checkpoint_record, past
from engine_mlx.training.reference import reference_from, selector_loss, start_selector
from engine_mlx.training.vocab import logits_over, renormalised, subset, weighted_kl

STATE_FILE = "train_state.safetensors"
HISTORY_FILE = "train_state.json"


@dataclass(frozen=True)
class DrafterTrainConfig:
    steps: int = 1000
    layers: int = 3
    mlp: int = 0  # MLP width of the draft layers; 0: the target's
    block: int = 8
    conv: int = 4
    lr: float = 6e-4
    warmup: int = 30
    sequences: int = 8  # sequences per step
    anchors: int = 16  # blocks per sequence
    decay: float = 0.8
    vocab_sample: int = 2048  # random extra tokens scored per step; 0 = the full vocabulary
    draft_vocab: int = DEFAULT_SIZE  # tokens it may propose (decoding.draft_vocab); 0: all
    init_from_target: bool = True
    seed: int = 0
    checkpoint_every: int = 50
    warm_start: str = ""  # a trained drafter to start from instead (any variant)
    # llama.cpp's DFlash2 (training.reference) when conv_group > 0: the dynamic convolution
    # of ``conv`` taps over groups of this many channels, and the selector
    conv_group: int = 0
    selector_rank: int = 16
    selector_top_k: int = 8


@dataclass
class Batch:
    features: mx.array  # [S, T, F]
    roots: mx.array  # [S*M] anchor tokens
    anchors: mx.array  # [S*M] anchor positions
    mask: mx.array  # [S, 1, M*B, T+M*B]
    teacher_ids: mx.array  # [S*M, B-1, K] indices into ``vocab`` (or token ids if None)
    teacher_p: mx.array  # [S*M, B-1, K]
    weights: mx.array  # [S*M, B-1] (0 where the block runs past the sequence)
    vocab: mx.array | None = None  # token ids scored this step (None: all)


def new_drafter(target: TargetModel, config: DrafterTrainConfig, capture: tuple[int, ...]):
    """A drafter to train: from ``warm_start`` when set (converted to the reference format
    when ``conv_group`` asks for it), else shaped like the target and seeded by its layers."""
    if config.warm_start:
        model = load_dflash(config.warm_start)
        if tuple(model.config.target_layer_ids) != tuple(capture):
            raise ValueError(
                f"{config.warm_start} reads target layers {list(model.config.target_layer_ids)}"
                f", the dataset has {list(capture)}"
            )
        if config.conv_group and not model.config.reference_dflash2:
            model = reference_from(
                model, config.conv, config.conv_group, config.selector_rank, config.selector_top_k
            )
        model.set_dtype(mx.float32)  # a shipped drafter is float16: trained so, it went NaN
        return model
    from engine_mlx.api import drafter_config_for

    cfg: DFlashConfig = drafter_config_for(
        target,
        layers=config.layers,
        block=config.block,
        conv=0 if config.conv_group else config.conv,
        capture=capture,
        mlp=config.mlp,
    )
    if config.conv_group:
        cfg = replace(
            cfg,
            conv_kernel_size=config.conv,
            conv_group_size=config.conv_group,
            selector_rank=config.selector_rank,
            selector_top_k=config.selector_top_k,
        )
    mx.random.seed(config.seed)
    model = DFlashModel(cfg)
    if config.init_from_target:
        copy_target_layers(model, target)
    if cfg.reference_dflash2:
        start_selector(model, config.seed)
    return model


def copy_target_layers(model: DFlashModel, target: TargetModel) -> None:
    """Start draft layer i as the target's layer n - L + i (attention, MLP, norms), and the
    final norm as the target's: every parameter whose name matches is copied; a narrower MLP
    takes the first rows (gate, up) and columns (down) of the target's."""
    first = len(target.layers) - len(model.layers)
    for i, layer in enumerate(model.layers):
        source = dict(tree_flatten(target.layers[first + i].parameters()))
        mine = dict(tree_flatten(layer.parameters()))
        layer.load_weights(
            [(k, _fit(v, mine[k].shape)) for k, v in source.items() if _fits(v, mine.get(k))],
            strict=False,
        )
    model.norm.weight = target.inner.norm.weight
    mx.eval(model.parameters())


def _fits(source: mx.array, mine: mx.array | None) -> bool:
    return (
        mine is not None
        and source.ndim == mine.ndim
        and all(a >= b for a, b in zip(source.shape, mine.shape, strict=True))
    )


def _fit(source: mx.array, shape: tuple[int, ...]) -> mx.array:
    """``source``'s leading block of ``shape`` (itself when the shapes match)."""
    return source[tuple(slice(0, n) for n in shape)]


class BlockSampler:
    """Random packed batches of blocks from the dataset (held in memory)."""

    def __init__(self, folder: str | Path, block: int) -> None:
        self.block = block
        fields = ("tokens", "lengths", "features", "top_ids", "top_logp")
        self.shards = load_fields(folder, fields)
        self.teacher_forced = dataset_config(folder).get("teacher_forced", False)
        usable = [(s, r) for s, sh in enumerate(self.shards) for r in range(len(sh["lengths"]))]
        self.rows = [(s, r) for s, r in usable if self._last_anchor(s, r) >= self._first(s)]
        if not self.rows:
            raise ValueError(f"{folder}: no sequence has a continuation long enough to train on")

    def _first(self, shard: int) -> int:
        return int(self.shards[shard]["prompt_length"])

    def _last_anchor(self, shard: int, row: int) -> int:
        return int(self.shards[shard]["lengths"][row]) - 2

    def sample(
        self,
        rng: np.random.Generator,
        sequences: int,
        anchors: int,
        vocab: tuple[int, int] = (0, 0),
    ) -> Batch:
        """``vocab`` = (vocabulary size, extra random tokens): score only the teachers' tokens
        plus that many random others (0: the whole vocabulary)."""
        shard = self.rows[int(rng.integers(len(self.rows)))][0]
        rows = [r for s, r in self.rows if s == shard]
        picked = rng.choice(rows, size=min(sequences, len(rows)), replace=False)
        sh, b = self.shards[shard], self.block
        tokens, total = sh["tokens"], sh["tokens"].shape[1]
        first = self._first(shard)
        roots, starts, t_ids, t_logp, weights = [], [], [], [], []
        for row in picked:
            last = self._last_anchor(shard, int(row))
            pos = rng.integers(first, last + 1, size=anchors)
            for a in pos:
                targets = np.arange(a + 1, a + b)  # token positions the block predicts
                valid = targets <= last + 1
                rows_t = np.minimum(targets - 1, total - 1)
                teacher = sh["top_ids"][row, rows_t]
                if self.teacher_forced:
                    valid &= own_path(tokens[row, np.minimum(targets, total - 1)], teacher[:, 0])
                roots.append(tokens[row, a])
                starts.append(a)
                t_ids.append(teacher)
                t_logp.append(sh["top_logp"][row, rows_t].astype(np.float32))
                weights.append(valid.astype(np.float32))
        p = renormalised(np.stack(t_logp))
        starts_np = np.array(starts)
        scored, ids = subset(np.stack(t_ids), vocab[0], vocab[1], rng)
        return Batch(
            features=mx.array(sh["features"][picked].astype(np.float32)),
            roots=mx.array(np.array(roots, dtype=np.int32)),
            anchors=mx.array(starts_np.astype(np.int32)),
            mask=mx.array(block_mask(starts_np.reshape(len(picked), anchors), b, total)),
            teacher_ids=mx.array(ids),
            teacher_p=mx.array(p.astype(np.float32)),
            weights=mx.array(np.stack(weights)),
            vocab=None if scored is None else mx.array(scored),
        )


def own_path(tokens: np.ndarray, choices: np.ndarray) -> np.ndarray:
    """Which block positions the teacher taught along its own path: position j's teacher saw
    the text's tokens before j, and a drafter at run time drafts after the target's own
    choices, so j counts only where every earlier text token was the teacher's choice
    (``tokens[i]`` the text at block position i + 1, ``choices[i]`` the teacher's there).
    Generated replies are the target's own path throughout; on corpus text, the first
    position always counts and a later one where the target would have written the text."""
    agree = tokens[:-1] == choices[:-1]
    return np.concatenate([[True], np.cumprod(agree).astype(bool)])


def block_mask(anchors: np.ndarray, block: int, context: int) -> np.ndarray:
    """[S, 1, M*B, T+M*B]: block m's queries see context positions < its anchor and the B
    keys of block m (bidirectional inside the block)."""
    seqs, per_seq = anchors.shape
    ctx = np.arange(context)[None, None, :] < anchors[:, :, None]  # [S, M, T]
    ctx = np.repeat(ctx, block, axis=1)  # [S, M*B, T]
    own = np.kron(np.eye(per_seq, dtype=bool), np.ones((block, block), dtype=bool))
    own = np.broadcast_to(own, (seqs, per_seq * block, per_seq * block))
    return np.concatenate([ctx, own], axis=-1)[:, None]


def drafter_logits(model: DFlashModel, target: TargetModel, batch: Batch, mask_id: int):
    """Logits [S*M, B-1, vocab] for the masked positions of every block in the batch (over
    ``batch.vocab`` when set, see ``training.vocab``)."""
    return logits_over(target, drafter_hidden(model, target, batch, mask_id), batch.vocab)


def drafter_hidden(model: DFlashModel, target: TargetModel, batch: Batch, mask_id: int):
    """Final-normed hidden states [S*M, B-1, H] of the masked positions."""
    ctx = model.project_context([batch.features])
    ctx_kv = [layer.self_attn.context_kv(ctx, model.rope, 0) for layer in model.layers]
    b = model.config.block_size
    block = mx.concatenate(
        [batch.roots[:, None], mx.full((batch.roots.shape[0], b - 1), mask_id, mx.int32)], 1
    )
    return model(target.embed(block), ctx_kv, batch.anchors, batch.mask)[:, 1:]


def drafter_loss(model: DFlashModel, target: TargetModel, batch: Batch, mask_id: int, decay):
    """(distillation loss, plus the selector's for a reference drafter; the logits; [S*M,
    B-1] whether the selector's walk picks the target's token, all False without one)."""
    hidden = drafter_hidden(model, target, batch, mask_id)
    logits = logits_over(target, hidden, batch.vocab)  # [S*M, B-1, vocab]
    w = batch.weights * (decay ** mx.arange(logits.shape[1], dtype=mx.float32))
    loss = weighted_kl(logits, batch.teacher_ids, batch.teacher_p, w)
    if not model.config.reference_dflash2:
        return loss, logits, mx.zeros(w.shape, dtype=mx.bool_)
    labels = batch.teacher_ids[..., 0]
    chosen, walked = selector_loss(model, hidden, logits, batch.roots, labels, batch.vocab, w)
    return loss + chosen, logits, walked


def accepted_lengths(hit: mx.array | np.ndarray, batch: Batch) -> np.ndarray:
    """Single-path acceptance per block from [S*M, B-1] per-position hits: the leading
    positions where the draft's pick is the target's most likely token (exact under greedy
    decoding of greedy continuations)."""
    valid = np.array(hit) & (np.array(batch.weights) > 0)
    return np.cumprod(valid, axis=1).sum(axis=1)


def argmax_hits(logits: mx.array, batch: Batch) -> mx.array:
    """[S*M, B-1]: the draft's argmax is the target's most likely token."""
    return mx.argmax(logits, -1) == batch.teacher_ids[..., 0]


def _schedule(config: DrafterTrainConfig) -> Callable:
    warm = optim.linear_schedule(config.lr * 0.05, config.lr, max(1, config.warmup))
    cosine = optim.cosine_decay(config.lr, max(1, config.steps - config.warmup), config.lr * 0.1)
    return optim.join_schedules([warm, cosine], [config.warmup])


def train_drafter(
    target: TargetModel,
    data: str | Path,
    out: str | Path,
    config: DrafterTrainConfig = DrafterTrainConfig(),
    log: Callable[[dict], None] = print,
    deadline: float | None = None,
) -> list[dict]:
    """Train (or resume) a drafter into the folder ``out``; returns the per-step history.
    Past ``deadline`` (``time.monotonic()``) it checkpoints and stops after the current step."""
    out = Path(out)
    capture = dataset_capture(data)
    sampler = BlockSampler(data, config.block)
    _recover(out)
    history_file = out / HISTORY_FILE
    resumed = history_file.exists() and (out / "config.json").exists()
    model = load_dflash(out) if resumed else new_drafter(target, config, capture)
    history: list[dict] = json.loads(history_file.read_text())["history"] if resumed else []
    mask_id = int(model.config.mask_token_id)
    counts = continuation_counts(sampler.shards, target.spec.vocab_size)
    vocab_size = target.spec.vocab_size
    draft_vocab = (
        frequent_tokens(counts, config.draft_vocab) if 0 < config.draft_vocab < vocab_size else None
    )
    optimizer = optim.AdamW(learning_rate=_schedule(config), weight_decay=0.01)
    optimizer.init(model.trainable_parameters())
    if resumed and (out / STATE_FILE).exists():
        optimizer.state = tree_unflatten(list(mx.load(str(out / STATE_FILE)).items()))
    model.train()

    def loss_fn(m: DFlashModel, batch: Batch):
        return drafter_loss(m, target, batch, mask_id, config.decay)

    loss_and_grad = nn.value_and_grad(model, loss_fn)
    t0 = time.perf_counter()
    for step in range(len(history), config.steps):
        rng = np.random.default_rng([config.seed, step])
        vocab = (target.spec.vocab_size, config.vocab_sample)
        batch = sampler.sample(rng, config.sequences, config.anchors, vocab)
        (loss, logits, walked), grads = loss_and_grad(model, batch)
        grads, _ = optim.clip_grad_norm(grads, 1.0)
        optimizer.update(model, grads)
        mx.eval(model.parameters(), optimizer.state, loss, logits, walked)
        accepted = accepted_lengths(argmax_hits(logits, batch), batch)
        record = {"step": step + 1, "loss": float(loss), "tau": 1 + float(accepted.mean())}
        if model.config.reference_dflash2:
            record["tau_walk"] = 1 + float(accepted_lengths(walked, batch).mean())
        history.append(record)
        check_finite(loss, step + 1)
        stop = past(deadline)
        if stop or (step + 1) % config.checkpoint_every == 0 or step + 1 == config.steps:
            _checkpoint(model, optimizer, out, history, config, draft_vocab)
            metrics = {"loss": ("loss", 4), "tau_proxy": ("tau", 3)}
            if "tau_walk" in record:
                metrics["tau_walk"] = ("tau_walk", 3)
            log(checkpoint_record(history, config.checkpoint_every, t0, metrics))
        if stop:
            break
    model.eval()
    return history


def _checkpoint(model, optimizer, out: Path, history: list[dict], config, vocab=None) -> None:
    """Weights, optimizer moments and history go to a fresh folder that then replaces the
    previous checkpoint, so an interruption mid-write leaves the last one usable."""
    tmp, old = _sibling(out, "saving"), _sibling(out, "old")
    for stale in (tmp, old):
        _remove_tree(stale)
    save_dflash(model, tmp)
    if vocab is not None:
        save_draft_vocab(tmp, vocab)
    mx.save_safetensors(str(tmp / STATE_FILE), dict(tree_flatten(optimizer.state)))
    (tmp / HISTORY_FILE).write_text(json.dumps({"config": asdict(config), "history": history}))
    if out.exists():
        out.replace(old)
    tmp.replace(out)
    _remove_tree(old)


def _recover(out: Path) -> None:
    """A crash between the two renames of ``_checkpoint`` leaves only ``.old``: use it."""
    old = _sibling(out, "old")
    if not out.exists() and old.exists():
        old.replace(out)


def _sibling(out: Path, suffix: str) -> Path:
    return out.with_name(f"{out.name}.{suffix}")


def _remove_tree(folder: Path) -> None:
    if folder.exists():
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
