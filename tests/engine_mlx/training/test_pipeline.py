"""train-pair end to end at toy scale: the target's replies, a drafter and an MTP head trained
on them, exported where the engine loads them; a spent budget stops every stage after its
first shard or step, keeping and exporting what it made, and a rerun resumes from there."""

from __future__ import annotations

import json

from engine_mlx.models.dflash import load_dflash
from engine_mlx.models.mtp import load_mtp
from engine_mlx.training.dataset import shard_paths
from engine_mlx.training.pipeline import PLANS, context_layers, train_pair
from tests.engine_mlx.training.conftest import CODE, PROSE


def _corpora(folder):
    for kind, text in (("prose", PROSE), ("code", CODE)):
        (folder / kind).mkdir(parents=True)
        (folder / kind / f"{kind}.txt").write_text(text * 60)
    return folder


def _steps(history_file) -> int:
    return len(json.loads(history_file.read_text())["history"])


def test_a_spent_budget_keeps_one_of_everything_and_a_rerun_finishes(tiny_target, tmp_path):
    target = tiny_target("llama")
    corpora, work, out = _corpora(tmp_path / "corpora"), tmp_path / "work", tmp_path / "pair"
    plan = PLANS["toy"]
    records: list[dict] = []

    exported = train_pair(target, corpora, work, out, plan, budget_s=0, log=records.append)
    assert len(shard_paths(work / "data")) == 1
    assert _steps(work / "drafter" / "train_state.json") == 1
    assert _steps(work / "mtp.json") == 1
    assert {r["stage"] for r in records} == {"data", "drafter", "mtp", "export"}
    assert load_dflash(exported / f"{target.spec.name}-DFlash2").config.block_size == 4
    assert load_mtp(target, exported / "mtp.safetensors") is not None

    train_pair(target, corpora, work, out, plan, budget_s=600, log=lambda _: None)
    assert len(shard_paths(work / "data")) == plan.dataset.shards
    assert _steps(work / "drafter" / "train_state.json") == plan.drafter.steps
    assert _steps(work / "mtp.json") == plan.mtp.steps
    assert load_dflash(out / f"{target.spec.name}-DFlash2").config.target_layer_ids == (0, 1)


def test_context_layers_spread_from_the_second_to_the_third_to_last():
    assert context_layers(24, 5) == (1, 6, 11, 16, 21)
    assert context_layers(3, 2) == (0, 1)  # too shallow to spread
