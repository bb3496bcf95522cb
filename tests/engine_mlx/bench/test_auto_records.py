"""The bench's per-step records for auto mode and the calibration plot drawn from them."""

from __future__ import annotations

from engine_mlx.bench.measure import run_ours
from engine_mlx.bench.plot import calibration_points, plot_calibration
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.session import Session
from tests.support.drafters import random_dflash


def test_auto_runs_record_every_step(tiny_target):
    target = tiny_target("llama")
    session = Session(target, DFlashDrafter(random_dflash(target), target))
    ids = target.tokenizer.encode("Hello world, the quick brown fox")
    result = run_ours(session, ids, GenerationConfig(max_tokens=24, mode="auto"))
    steps = result["steps"]
    assert len(steps) == sum(result["modes"].values()) - 1  # all but the prefill's token
    assert sum(s["tokens"] for s in steps) == result["tokens"] - 1
    assert set(steps[0]) == {
        "mode", "width", "verified", "predicted_tokens", "tokens", "predicted_ms", "ms"
    }  # fmt: skip
    for s in steps:
        assert s["ms"] > 0 and s["verified"] >= 1
        if s["mode"] == "ar":
            assert s["verified"] == 1 and s["tokens"] == 1
    plain = run_ours(session, ids, GenerationConfig(max_tokens=8, mode="ar"))
    assert plain["steps"] == []  # only auto is recorded step by step


def test_calibration_plot_from_records(tmp_path):
    steps = [
        {"mode": "dflash2", "predicted_tokens": p, "tokens": t}
        for p, t in [(1.5, 1), (2.2, 3), (3.1, 3), (1.0, 1)]
    ]
    report = {"results": [{"steps": [steps, [{"mode": "ar", "predicted_tokens": 0.0}]]}]}
    assert calibration_points(report) == [(1.5, 1), (2.2, 3), (3.1, 3), (1.0, 1)]
    out = plot_calibration(report, tmp_path / "calibration.png")
    assert out.stat().st_size > 5000 and out.read_bytes()[:4] == b"\x89PNG"
