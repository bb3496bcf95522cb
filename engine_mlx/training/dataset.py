"""Training data for drafters: the target's own continuations, with what the target saw.

DFlash drafters (and MTP heads) are trained on text the target generated, because at run time
they predict the target's continuation of its own output. One batched pass per prompt batch
produces everything training needs, so the target never runs again during training:

- ``tokens``: prompt + continuation (cut at the first end-of-sequence token);
- ``features``: the outputs of the drafter's context layers, concatenated (fp16);
- ``hidden``: the last layer's output before the final norm (fp16), for MTP heads;
- ``top_ids`` / ``top_logp``: the target's top-k next-token distribution at every
  continuation position (the distillation teacher; index i predicts token i + 1).

Shards are written one per batch, each a folder of ``.npy`` files (``shard_00000/``) next to
``manifest.json``, so training memory-maps them: a dataset with 2k-token contexts holds ~9 kB of
features per token, more than fits in memory. A shard folder appears complete or not at all
(written beside it, then renamed); a rerun with the same settings skips the shards that exist,
so generation resumes after an interruption.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from engine_mlx.models.target import TargetModel
from engine_mlx.training.progress import past
from engine_mlx.training.prompts import PromptBuilder, continuation_batches, prompt_batches

MANIFEST = "manifest.json"
PREFILL_TOKENS = 8192
"""Prompt tokens per prefill forward (batch x chunk), so 2k-token prompts in batches of 32
never hold more than ~1 GB of attention scores."""
TEACHER_LOGITS = 2**26
"""Logits held at once by a teacher-forced forward (batch x chunk x vocabulary): 256 MB."""


@dataclass(frozen=True)
class DatasetConfig:
    shards: int = 24
    batch: int = 48
    new_tokens: int = 128
    prompt_lengths: tuple[int, ...] = (64, 128, 256)
    mix: dict[str, float] = field(
        default_factory=lambda: {"math": 0.2, "chat": 0.15, "code": 0.4, "prose": 0.25}
    )
    sampled_fraction: float = 0.25  # this share of batches, evenly spread, sampled at temperature
    temperature: float = 0.7
    teacher_top_k: int = 32
    capture: tuple[int, ...] = ()  # drafter context layers; the last layer is always kept
    seed: int = 0
    # Teacher forcing: replies are corpus text (prose and code), and one forward over each
    # whole sequence records the target's distribution at every position: several times the
    # tokens per hour of generating, at the cost of replies the target did not write.
    teacher_forced: bool = False


@dataclass
class Shard:
    tokens: np.ndarray  # [B, T] int32
    lengths: np.ndarray  # [B] valid tokens (continuation cut at EOS)
    prompt_length: int
    categories: list[str]
    features: np.ndarray  # [B, T, len(capture) * H] fp16
    hidden: np.ndarray  # [B, T, H] fp16, last layer before the final norm
    top_ids: np.ndarray  # [B, T, K] int32, valid from prompt_length - 1
    top_logp: np.ndarray  # [B, T, K] fp16

    def save(self, path: Path) -> None:
        """Write the shard folder atomically: beside ``path`` first, renamed when complete."""
        tmp = path.with_name(f".{path.name}.writing")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for name in _ARRAYS:
            np.save(tmp / f"{name}.npy", getattr(self, name))
        info = {"prompt_length": self.prompt_length, "categories": self.categories}
        (tmp / _INFO).write_text(json.dumps(info))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Shard:
        """The shard with its arrays memory-mapped (read from disk as they are indexed)."""
        info = json.loads((path / _INFO).read_text())
        arrays = {name: np.load(path / f"{name}.npy", mmap_mode="r") for name in _ARRAYS}
        return cls(
            prompt_length=int(info["prompt_length"]), categories=info["categories"], **arrays
        )


_ARRAYS = ("tokens", "lengths", "features", "hidden", "top_ids", "top_logp")
_INFO = "shard.json"


def _top_k(logits: mx.array, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` likeliest ids and their log-probabilities, most likely first ([..., 0] is the
    greedy pick). In numpy: MLX's CPU logsumexp and argpartition took 3-5x as long over a
    150k-token vocabulary, a quarter of a batched generation step."""
    scores = np.array(logits.astype(mx.float32))
    ids = np.argpartition(scores, -k, axis=-1)[..., -k:]
    top = np.take_along_axis(scores, ids, axis=-1)
    peak = top.max(axis=-1, keepdims=True)
    logsumexp = peak + np.log(np.exp(scores - peak).sum(axis=-1, keepdims=True))
    order = np.argsort(-top, axis=-1, kind="stable")
    ranked = np.take_along_axis(top, order, axis=-1) - logsumexp
    return np.take_along_axis(ids, order, axis=-1), ranked


def generate_shard(
    target: TargetModel,
    prompts: list[tuple[int, ...]],
    categories: list[str],
    config: DatasetConfig,
    temperature: float,
    key: mx.array,
) -> Shard:
    """Continue equal-length prompts in one batch, recording what training needs.

    Rows that have ended their reply leave the batch (their cache rows are dropped once a
    quarter of the batch has ended), so a batch of short answers does not pay for the longest.
    Positions after a row's end-of-sequence token are left zero.
    """
    last = len(target.layers) - 1
    capture = (*config.capture, last)
    cache = target.make_cache()
    tokens = mx.array(np.array(prompts, dtype=np.int32))
    b, prompt_len = tokens.shape
    total, k = prompt_len + config.new_tokens, config.teacher_top_k
    hidden_size = target.spec.hidden_size
    features = np.zeros((b, total, len(config.capture) * hidden_size), np.float16)
    hidden = np.zeros((b, total, hidden_size), np.float16)
    top_ids = np.zeros((b, total, k), np.int32)
    top_logp = np.zeros((b, total, k), np.float16)
    all_tokens = np.zeros((b, total), np.int32)
    all_tokens[:, :prompt_len] = np.array(prompts, dtype=np.int32)
    lengths = np.full(b, total, dtype=np.int32)

    def record(rows: np.ndarray, start: int, out) -> None:
        n = out.features[0].shape[1]
        feats = mx.concatenate(out.features[:-1], axis=-1).astype(mx.float16)
        features[rows, start : start + n] = np.array(feats)
        hidden[rows, start : start + n] = np.array(out.features[-1].astype(mx.float16))

    rows = np.arange(b)  # the batch rows still generating, in the cache's row order
    chunk = max(16, PREFILL_TOKENS // b)  # bounds the attention scores' memory
    for start in range(0, prompt_len, chunk):
        piece = tokens[:, start : start + chunk]
        out = target.forward(piece, cache, capture=capture, last_only=True)
        mx.eval(out.logits, out.features)
        record(rows, start, out)
    logits = out.logits[:, -1]
    eos = np.array(sorted(getattr(target.tokenizer, "eos_token_ids", None) or []), np.int32)
    ended = np.zeros(b, dtype=bool)  # indexed like ``rows``
    for step in range(config.new_tokens):
        pos = prompt_len + step  # the position of the token chosen now
        ids, logp = _top_k(logits, k)
        if temperature > 0:
            key, sub = mx.random.split(key)
            nxt = mx.random.categorical(logits.astype(mx.float32) / temperature, key=sub)
        else:
            nxt = mx.argmax(logits, axis=-1)
        top_ids[rows, pos - 1] = ids
        top_logp[rows, pos - 1] = logp
        chosen = np.array(nxt).astype(np.int32)
        all_tokens[rows, pos] = chosen
        out = target.forward(mx.array(chosen)[:, None], cache, capture=capture)
        logits = out.logits[:, -1]
        mx.eval(logits, out.features)
        record(rows, pos, out)
        now_ended = ~ended & np.isin(chosen, eos)
        lengths[rows[now_ended]] = pos + 1  # keep the EOS: drafting it is useful
        ended |= now_ended
        if ended.all():
            break
        if ended.sum() * 4 >= len(rows):
            keep = np.flatnonzero(~ended)
            _keep_cache_rows(cache, mx.array(keep))
            rows, ended, logits = rows[keep], ended[keep], logits[mx.array(keep)]
    else:
        ids, logp = _top_k(logits, k)  # the last position's teacher
        top_ids[rows, total - 1] = ids
        top_logp[rows, total - 1] = logp
    for row in range(b):  # nothing after a row's end is data
        end = lengths[row]
        all_tokens[row, end:] = 0
        features[row, end:] = 0
        hidden[row, end:] = 0
        top_ids[row, end:] = 0
        top_logp[row, end:] = 0
    return Shard(
        tokens=all_tokens,
        lengths=lengths,
        prompt_length=prompt_len,
        categories=categories,
        features=features,
        hidden=hidden,
        top_ids=top_ids,
        top_logp=top_logp,
    )


def teacher_forced_shard(
    target: TargetModel,
    sequences: list[tuple[int, ...]],
    prompt_length: int,
    categories: list[str],
    config: DatasetConfig,
) -> Shard:
    """One forward over equal-length sequences (prompt + corpus reply), in chunks, recording
    the features and hidden state of every position and the teacher's top-k from the prompt's
    last position on (index i predicts token i + 1; the prompt is not taught, as in
    generated shards)."""
    last = len(target.layers) - 1
    capture = (*config.capture, last)
    cache = target.make_cache()
    tokens = np.array(sequences, dtype=np.int32)
    b, total = tokens.shape
    k, hidden_size = config.teacher_top_k, target.spec.hidden_size
    features = np.zeros((b, total, len(config.capture) * hidden_size), np.float16)
    hidden = np.zeros((b, total, hidden_size), np.float16)
    top_ids = np.zeros((b, total, k), np.int32)
    top_logp = np.zeros((b, total, k), np.float16)
    # The prompt is fed like a prefill (no logits but the last); the reply's positions keep
    # their vocabulary-wide logits for the teacher, so its chunks are short.
    teach_from = prompt_length - 1
    chunk = max(8, TEACHER_LOGITS // (b * target.spec.vocab_size))
    starts = [*range(0, teach_from, max(chunk, PREFILL_TOKENS // b)), teach_from]
    starts += list(range(teach_from + chunk, total, chunk))
    for start, end in zip(starts, [*starts[1:], total], strict=True):
        piece = mx.array(tokens[:, start:end])
        teach = start >= teach_from
        out = target.forward(piece, cache, capture=capture, last_only=not teach)
        feats = mx.concatenate(out.features[:-1], axis=-1).astype(mx.float16)
        mx.eval(feats, out.features[-1], out.logits)
        features[:, start:end] = np.array(feats)
        hidden[:, start:end] = np.array(out.features[-1].astype(mx.float16))
        if teach:
            top_ids[:, start:end], top_logp[:, start:end] = _top_k(out.logits, k)
    return Shard(
        tokens=tokens,
        lengths=np.full(b, total, dtype=np.int32),
        prompt_length=prompt_length,
        categories=categories,
        features=features,
        hidden=hidden,
        top_ids=top_ids,
        top_logp=top_logp,
    )


def _keep_cache_rows(cache: list[Any], keep: mx.array) -> None:
    """Drop the batch rows not in ``keep`` from every layer's cache (attention K/V, or the
    recurrent state of a linear-attention layer)."""
    for layer in cache:
        if hasattr(layer, "keys"):
            if layer.keys is not None:
                layer.keys, layer.values = layer.keys[keep], layer.values[keep]
        else:
            layer.cache = [None if a is None else a[keep] for a in layer.cache]


def build_dataset(
    target: TargetModel,
    builder: PromptBuilder,
    out: str | Path,
    config: DatasetConfig,
    log: Callable[[dict], None] = print,
    deadline: float | None = None,
) -> Path:
    """Generate (or finish generating) ``config.shards`` shards into ``out``; past
    ``deadline`` (``time.monotonic()``) no new shard is started once there is one."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = out / MANIFEST
    settings = {**asdict(config), "target": target.spec.name}
    if manifest.exists():  # the shard count may change: more shards extend the dataset
        previous = json.loads(manifest.read_text())["config"]
        mine = json.loads(json.dumps(settings))
        if {**previous, "shards": 0} != {**mine, "shards": 0}:
            raise ValueError(
                f"{out} holds a dataset made with other settings; use a new folder or delete it"
            )
    manifest.write_text(json.dumps({"config": settings}, indent=2))
    common = {"batch": config.batch, "lengths": config.prompt_lengths, "mix": config.mix}
    if config.teacher_forced:
        batches = continuation_batches(builder, reply=config.new_tokens, seed=config.seed, **common)
    else:
        batches = prompt_batches(builder, seed=config.seed, **common)
    t0 = time.perf_counter()
    for index in range(config.shards):
        prompts = next(batches)
        temperature = config.temperature if _sampled(index, config.sampled_fraction) else 0.0
        path = out / f"shard_{index:05d}"
        if path.exists():
            continue
        if index and past(deadline):
            break
        categories = [p.category for p in prompts]
        if config.teacher_forced:
            ids = [p.ids for p in prompts]
            length = prompts[0].prompt_length
            shard = teacher_forced_shard(target, ids, length, categories, config)
        else:
            key = mx.random.key(config.seed * 100_003 + index)
            ids = [p.ids for p in prompts]
            shard = generate_shard(target, ids, categories, config, temperature, key)
        shard.save(path)
        log(
            {
                "shard": index + 1,
                "of": config.shards,
                "category": prompts[0].category,
                "prompt_tokens": shard.prompt_length,
                "new_tokens": int((shard.lengths - shard.prompt_length).sum()),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    return out


def _sampled(index: int, fraction: float) -> bool:
    """Whether batch ``index`` is sampled: exactly ``fraction`` of every run of batches,
    evenly spread (a random draw per batch can miss the share on a short dataset)."""
    return int((index + 1) * fraction) > int(index * fraction)


def shard_paths(folder: str | Path) -> list[Path]:
    paths = sorted(p for p in Path(folder).glob("shard_*") if (p / _INFO).is_file())
    if not paths:
        raise FileNotFoundError(f"{folder}: no dataset shards (make one with make-dataset)")
    return paths


def dataset_config(folder: str | Path) -> dict[str, Any]:
    """The settings the dataset was made with (its manifest's)."""
    manifest = Path(folder) / MANIFEST
    if not manifest.exists():
        raise FileNotFoundError(f"{folder}: no {MANIFEST}; make the dataset with make-dataset")
    return json.loads(manifest.read_text())["config"]


def dataset_capture(folder: str | Path) -> tuple[int, ...]:
    """The target layers whose features the dataset holds (the drafter must read these)."""
    return tuple(dataset_config(folder)["capture"])


def load_fields(folder: str | Path, fields: tuple[str, ...]) -> list[dict[str, np.ndarray]]:
    """The named arrays of every shard (memory-mapped), plus ``prompt_length`` and
    ``categories``."""
    shards = []
    for path in shard_paths(folder):
        info = json.loads((path / _INFO).read_text())
        shard: dict = {name: np.load(path / f"{name}.npy", mmap_mode="r") for name in fields}
        shard["prompt_length"] = int(info["prompt_length"])
        shard["categories"] = info["categories"]
        shards.append(shard)
    return shards
