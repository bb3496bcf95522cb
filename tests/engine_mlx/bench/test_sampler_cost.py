"""``bench --sampler-cost``: every (vocabulary, setting, rows) cell and every stage timed, in
the JSON and the tables, without a model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine_mlx.bench import sampler_cost, sampler_stages
from engine_mlx.cli import main
from engine_mlx.cpu.sampler import host_sampler


def test_json_report_has_every_cell(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(sampler_cost, "VOCABS", (3000, 700))
    monkeypatch.setattr(sampler_cost, "ROWS", (1, 8))
    out = tmp_path / "sampler.json"
    assert main(["bench", "--sampler-cost", "--repeats", "2", "--json-out", str(out)]) == 0
    report = json.loads(out.read_text())
    cells = {(c["vocab"], c["setting"], c["rows"]) for c in report["cells"]}
    assert cells == {(v, s, n) for v in (3000, 700) for s in sampler_cost.SETTINGS for n in (1, 8)}
    assert all(c["sample_ms"] > 0 and c["logprobs_ms"] > 0 for c in report["cells"])
    assert report["settings"]["defaults"] == {
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.8,
        "min_p": 0.0,
        "seed": None,
        "repetition_penalty": 1.05,
    }
    assert {(s["vocab"], s["rows"]) for s in report["stages"]} == {
        (v, n) for v in (3000, 700) for n in (1, 8)
    }
    printed = capsys.readouterr().out
    for vocab in ("3,000", "700"):
        assert f"vocab {vocab}: sample ms" in printed
        assert f"vocab {vocab}: where a sampled token's time goes" in printed
    assert printed.count("8 rows / 1") == 4


@pytest.mark.parametrize("c_filters", [True, False])
def test_every_stage_is_timed_on_either_path(monkeypatch, c_filters):
    """The split names the stages of the path the sampler takes: the C filters' one call
    asked for one more thing at a time, or the MLX ops one by one."""
    if not c_filters:
        monkeypatch.setattr(sampler_stages, "host_sampler", lambda: None)
    elif host_sampler() is None:
        pytest.skip("the C filters did not build here")
    stages = dict(sampler_stages.stage_costs(5000, 4, repeats=2))
    assert all(np.isfinite(ms) for ms in stages.values())
    assert "scatter back (logprobs only)" in stages
    if c_filters:
        assert stages["one pass: top-k selection"] > 0
        assert "+ the sampler around it" in stages
    else:
        assert stages["penalty (seen tokens only)"] > 0 and stages["top-k selection"] > 0


def test_logits_are_shaped_like_a_models():
    """Most of the probability on a few dozen tokens, as a trained model's next token."""
    x = sampler_stages.lm_logits(2, 20_000).astype(np.float64)
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    top = np.sort(p, axis=-1)[:, -40:].sum(axis=-1)
    assert np.all(top > 0.9)
