"""A drafter and an MTP head for a target, from nothing, inside a time budget: the target's own
replies -> the DFlash2 drafter -> the MTP head -> the shipped layout (``train-pair``).

Made for a lent GPU machine with a tight budget (about 12 minutes in all, nothing reachable
from it): each stage gets a share of the budget and stops after its current shard or step
once its share is spent, keeping what it made; everything resumes when run again with the
same work folder. ``toy`` is the same pipeline at a size the CPU runs in seconds (the tests
run it end to end); ``gpu`` follows the DFlash paper where the budget allows (random anchors,
position weights exp(-(k-1)/4) at block 8, lr 6e-4 with warm-up and cosine decay, clip 1.0,
replies of up to 512 tokens after prompts of up to 2,048, a quarter of them sampled at 0.7)
in the shipped drafter's shape, so the result can replace it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from engine_mlx.models.dflash import default_target_layer_ids
from engine_mlx.models.target import TargetModel
from engine_mlx.training.dataset import DatasetConfig, build_dataset
from engine_mlx.training.dflash import DrafterTrainConfig, train_drafter
from engine_mlx.training.export import export_pair
from engine_mlx.training.mtp import MTPTrainConfig, train_mtp
from engine_mlx.training.prompts import PromptBuilder, default_sources


@dataclass(frozen=True)
class PairPlan:
    dataset: DatasetConfig
    drafter: DrafterTrainConfig
    mtp: MTPTrainConfig
    shares: tuple[float, float, float]  # of the budget: data, drafter, MTP head
    budget_s: float  # the default budget
    context_layers: int  # target layers the drafter reads, spread from the 2nd to the 3rd-last


PLANS = {
    "toy": PairPlan(
        DatasetConfig(shards=2, batch=4, new_tokens=16, prompt_lengths=(128,)),
        DrafterTrainConfig(
            steps=4,
            layers=1,
            block=4,
            sequences=2,
            anchors=2,
            warmup=1,
            checkpoint_every=2,
            vocab_sample=64,
        ),
        MTPTrainConfig(steps=4, positions=32, checkpoint_every=2, vocab_sample=64),
        shares=(0.4, 0.35, 0.25),
        budget_s=300,
        context_layers=2,
    ),
    "gpu": PairPlan(
        DatasetConfig(
            shards=100_000, batch=256, new_tokens=512, prompt_lengths=(128, 256, 512, 1024, 2048)
        ),
        DrafterTrainConfig(
            steps=20_000,
            layers=3,
            mlp=1216,
            block=8,
            conv=4,
            lr=6e-4,
            warmup=800,
            sequences=64,
            anchors=16,
            decay=math.exp(-1 / 4),
            checkpoint_every=200,
        ),
        MTPTrainConfig(steps=20_000, positions=8192, checkpoint_every=200),
        shares=(0.45, 0.4, 0.15),
        budget_s=600,
        context_layers=5,  # the paper: 5 layers, tau +0.26 over 3
    ),
}


def train_pair(
    target: TargetModel,
    corpora: Path | None,
    work: Path,
    out: Path,
    plan: PairPlan,
    budget_s: float | None = None,
    log: Callable[[dict], None] = print,
) -> Path:
    """Data, drafter and head for ``target`` in ``work`` (resumable), exported to ``out``
    (``resources/companions/<target>`` layout) within ``budget_s`` seconds, give or take the
    last step of each stage and the export."""
    budget = plan.budget_s if budget_s is None else budget_s
    start = time.monotonic()
    deadlines, spent = [], 0.0
    for share in plan.shares:
        spent += share
        deadlines.append(start + budget * spent)
    work.mkdir(parents=True, exist_ok=True)
    capture = context_layers(len(target.layers), plan.context_layers)
    builder = PromptBuilder(target.tokenizer, default_sources(corpora), "train")
    dataset = replace(plan.dataset, capture=capture)

    def staged(stage: str) -> Callable[[dict], None]:
        return lambda record: log({"stage": stage, **record})

    build_dataset(target, builder, work / "data", dataset, staged("data"), deadlines[0])
    train_drafter(target, work / "data", work / "drafter", plan.drafter, staged("drafter"),
                  deadlines[1])  # fmt: skip
    train_mtp(target, work / "data", work / "mtp.safetensors", plan.mtp, staged("mtp"),
              deadlines[2])  # fmt: skip
    exported = export_pair(target.spec.name, work / "drafter", work / "mtp.safetensors", out)
    log({"stage": "export", "out": str(exported), "seconds": round(time.monotonic() - start, 1)})
    return exported


def context_layers(layers: int, wanted: int) -> tuple[int, ...]:
    """``wanted`` target layers spread from the 2nd to the third-to-last; a target too shallow
    for that (a test's) gives its first ones."""
    if layers >= wanted + 3:
        return tuple(default_target_layer_ids(layers, wanted))
    return tuple(range(min(wanted, layers)))
