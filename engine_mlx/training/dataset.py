"""Training data for drafters: the target's own continuations, with what the target saw.

DFlash drafters (and MTP heads) are trained on text the target generated, because at run time
they predict the target's continuation of its own output. One batched pass per prompt batch
produces everything training needs, so the target never runs again during training:

- ``tokens``: prompt + continuation (cut at the first end-of-sequence token);
- ``features``: the outputs of the drafter's context layers, concatenated (fp16);
- ``hidden``: the last layer's output before the final norm (fp16), for MTP heads;
- ``top_ids`` / ``top_logp``: the target's top-k next-token distribution at every
  continuation position (the distillation teacher; index i predicts token i + 1).

Shards are written one per batch (``shard_00000.npz``) next to ``manifest.json``; a rerun with
the same settings skips the shards that exist, so generation resumes after an interruption.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import mlx.core as mx
import numpy as np

from engine_mlx.models.target import TargetModel
from engine_mlx.training.prompts import PromptBuilder, prompt_batches

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class DatasetConfig:
    shards: int = 24
    batch: int = 48
    new_tokens: int = 128
    prompt_lengths: tuple[int, ...] = (64, 128, 256)
    mix: dict[str, float] = field(
        default_factory=lambda: {"math": 0.3, "code": 0.35, "prose": 0.35}
    )
    sampled_fraction: float = 0.25  # batches sampled at ``temperature``; the rest greedy
    temperature: float = 0.7
    teacher_top_k: int = 32
    capture: tuple[int, ...] = ()  # drafter context layers; the last layer is always kept
    seed: int = 0


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
        tmp = path.with_suffix(".tmp.npz")
        np.savez(
            tmp,
            tokens=self.tokens,
            lengths=self.lengths,
            prompt_length=np.int32(self.prompt_length),
            categories=np.array(self.categories),
            features=self.features,
            hidden=self.hidden,
            top_ids=self.top_ids,
            top_logp=self.top_logp,
        )
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Shard:
        with np.load(path) as z:
            return cls(
                tokens=z["tokens"],
                lengths=z["lengths"],
                prompt_length=int(z["prompt_length"]),
                categories=[str(c) for c in z["categories"]],
                features=z["features"],
                hidden=z["hidden"],
                top_ids=z["top_ids"],
                top_logp=z["top_logp"],
            )


def _top_k(logits: mx.array, k: int) -> tuple[mx.array, mx.array]:
    logp = logits.astype(mx.float32) - mx.logsumexp(logits.astype(mx.float32), -1, keepdims=True)
    ids = mx.argpartition(-logp, kth=k - 1, axis=-1)[..., :k]
    top = mx.take_along_axis(logp, ids, axis=-1)
    order = mx.argsort(-top, axis=-1)  # most likely first: [..., 0] is the greedy pick
    return mx.take_along_axis(ids, order, axis=-1), mx.take_along_axis(top, order, axis=-1)


def generate_shard(
    target: TargetModel,
    prompts: list[tuple[int, ...]],
    categories: list[str],
    config: DatasetConfig,
    temperature: float,
    key: mx.array,
) -> Shard:
    """Continue equal-length prompts in one batch, recording what training needs."""
    last = len(target.layers) - 1
    capture = (*config.capture, last)
    cache = target.make_cache()
    tokens = mx.array(np.array(prompts, dtype=np.int32))
    out = target.forward(tokens, cache, capture=capture)
    feats, hidden = [out.features[:-1]], [out.features[-1]]
    ids, logps = [], []
    logits = out.logits[:, -1]
    generated = []
    for _ in range(config.new_tokens):
        top_ids, top_logp = _top_k(logits, config.teacher_top_k)
        ids.append(top_ids)
        logps.append(top_logp)
        if temperature > 0:
            key, sub = mx.random.split(key)
            nxt = mx.random.categorical(logits.astype(mx.float32) / temperature, key=sub)
        else:
            nxt = mx.argmax(logits, axis=-1)
        generated.append(nxt)
        out = target.forward(nxt[:, None].astype(mx.int32), cache, capture=capture)
        feats.append(out.features[:-1])
        hidden.append(out.features[-1])
        logits = out.logits[:, -1]
        mx.eval(logits, out.features, top_ids, top_logp)
    top_ids, top_logp = _top_k(logits, config.teacher_top_k)  # the last position's teacher
    ids.append(top_ids)
    logps.append(top_logp)
    cont = np.array(mx.stack(generated, axis=1))
    b, prompt_len = tokens.shape
    lengths = np.full(b, prompt_len + cont.shape[1], dtype=np.int32)
    eos = set(getattr(target.tokenizer, "eos_token_ids", None) or [])
    for row in range(b):
        hits = [i for i, t in enumerate(cont[row]) if int(t) in eos]
        if hits:
            lengths[row] = prompt_len + hits[0] + 1  # keep the EOS: drafting it is useful
    all_tokens = np.concatenate([np.array(tokens), cont], axis=1)
    features = np.concatenate(
        [np.array(mx.concatenate(f, axis=-1).astype(mx.float16)) for f in feats], axis=1
    )
    hid = np.concatenate([np.array(h.astype(mx.float16)) for h in hidden], axis=1)
    pad = np.zeros((b, prompt_len - 1, config.teacher_top_k))
    top_ids = np.concatenate(
        [pad.astype(np.int32), np.stack([np.array(i) for i in ids], axis=1)], axis=1
    )
    top_logp = np.concatenate(
        [pad.astype(np.float16), np.stack([np.array(v).astype(np.float16) for v in logps], 1)],
        axis=1,
    )
    return Shard(
        tokens=all_tokens,
        lengths=lengths,
        prompt_length=prompt_len,
        categories=categories,
        features=features,
        hidden=hid,
        top_ids=top_ids,
        top_logp=top_logp,
    )


def build_dataset(
    target: TargetModel,
    builder: PromptBuilder,
    out: str | Path,
    config: DatasetConfig,
    log: Callable[[dict], None] = print,
) -> Path:
    """Generate (or finish generating) ``config.shards`` shards into ``out``."""
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
    batches = prompt_batches(
        builder,
        batch=config.batch,
        lengths=config.prompt_lengths,
        mix=config.mix,
        seed=config.seed,
    )
    rng = random.Random(config.seed)
    t0 = time.perf_counter()
    for index in range(config.shards):
        prompts = next(batches)
        temperature = config.temperature if rng.random() < config.sampled_fraction else 0.0
        path = out / f"shard_{index:05d}.npz"
        if path.exists():
            continue
        key = mx.random.key(config.seed * 100_003 + index)
        shard = generate_shard(
            target,
            [p.ids for p in prompts],
            [p.category for p in prompts],
            config,
            temperature,
            key,
        )
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


def shard_paths(folder: str | Path) -> list[Path]:
    paths = sorted(Path(folder).glob("shard_*.npz"))
    if not paths:
        raise FileNotFoundError(f"{folder}: no dataset shards (make one with make-dataset)")
    return paths


def dataset_capture(folder: str | Path) -> tuple[int, ...]:
    """The target layers whose features the dataset holds (the drafter must read these)."""
    manifest = Path(folder) / MANIFEST
    if not manifest.exists():
        raise FileNotFoundError(f"{folder}: no {MANIFEST}; make the dataset with make-dataset")
    return tuple(json.loads(manifest.read_text())["config"]["capture"])


def load_fields(folder: str | Path, fields: tuple[str, ...]) -> list[dict[str, np.ndarray]]:
    """The named arrays of every shard (plus ``prompt_length``), read without the rest."""
    shards = []
    for path in shard_paths(folder):
        with np.load(path) as z:
            shard = {name: z[name] for name in fields}
            shard["prompt_length"] = int(z["prompt_length"])
            shard["categories"] = [str(c) for c in z["categories"]]
        shards.append(shard)
    return shards
