"""The benchmark suite in its reduced configuration: every mode and the mlx-lm baseline per
category and depth, valid JSON, a PNG, and every mode's greedy output equal to plain."""

from __future__ import annotations

import json

from engine_mlx.cli import main
from engine_mlx.models.dflash import save_dflash
from engine_mlx.models.mtp import save_mtp
from tests.support.drafters import random_dflash, random_mtp_head


def test_reduced_suite_writes_json_and_plot(tiny_model_dir, tiny_target, tmp_path, capsys):
    target = tiny_target("llama")
    drafter = save_dflash(random_dflash(target, conv=2, block=4), tmp_path / "drafter")
    mtp = save_mtp(random_mtp_head(target), tmp_path / "mtp.safetensors")
    out, plot = tmp_path / "suite.json", tmp_path / "suite.png"
    code = main(
        [
            "bench",
            "--suite",
            "reduced",
            "--model",
            str(tiny_model_dir("llama")),
            "--drafter",
            str(drafter),
            "--mtp",
            str(mtp),
            "--json-out",
            str(out),
            "--plot-out",
            str(plot),
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    rows = report["results"]
    assert {r["category"] for r in rows} == {"math", "code", "prose"}
    assert {r["depth"] for r in rows} == {0, 96}
    per_cell = {(r["impl"], r["mode"], r["width"]) for r in rows}
    assert {
        ("flashchat", "ar", 1),
        ("flashchat", "dflash2", 1),
        ("flashchat", "dflash2", 2),
        ("flashchat", "mtp", 1),
        ("flashchat", "auto", 2),
        ("mlx-lm", "ar", 1),
    } <= per_cell
    assert report["drafter"] == "drafter"  # outside the working folder: its name only
    assert all(r["identical_to_ar"] for r in rows)  # greedy: every implementation agrees
    assert all(r["decode_tps"] > 0 for r in rows)
    ar_rows = [r for r in rows if r["impl"] == "flashchat" and r["mode"] == "ar"]
    assert all(abs(r["vs_ar"] - 1.0) < 1e-9 for r in ar_rows)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    assert "tok/s" in capsys.readouterr().out


def test_suite_repeats_every_cell_in_rounds(tiny_model_dir, tiny_target, tmp_path):
    drafter = save_dflash(random_dflash(tiny_target("llama"), conv=2, block=4), tmp_path / "d")
    out = tmp_path / "suite.json"
    argv = [
        *("bench", "--suite", "reduced", "--model", str(tiny_model_dir("llama"))),
        *("--drafter", str(drafter), "--categories", "math", "--depths", "0"),
        *("--modes", "ar,auto", "--no-baseline", "--json-out", str(out), "--repeats", "2"),
    ]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["repeats"] == 2
    (auto,) = [r for r in report["results"] if r["mode"] == "auto"]
    assert len(auto["steps"]) == 2  # one record per round
    assert main([*argv[:-1], "0"]) == 2
