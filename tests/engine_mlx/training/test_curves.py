"""Training curves: the smoothing is a trailing mean, the plot is a real PNG, and a file that
is not a trainer's history is refused with its name."""

from __future__ import annotations

import json

import pytest

from engine_mlx.cli import main
from engine_mlx.training.curves import moving_average


def test_moving_average_is_the_trailing_mean():
    assert moving_average([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert moving_average([2.0, 4.0], 10) == [2.0, 3.0]


def test_plot_training_writes_both_panels(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    history = [{"step": i + 1, "loss": 10.0 / (i + 1), "tau": 1 + i / 50} for i in range(60)]
    (tmp_path / "h.json").write_text(json.dumps({"config": {}, "history": history}))
    out = tmp_path / "curves.png"
    assert main(["plot-training", f"drafter={tmp_path / 'h.json'}", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(out) in capsys.readouterr().out


def test_plot_training_names_a_file_that_is_not_a_history(tmp_path, capsys):
    bad = tmp_path / "notes.json"
    bad.write_text('{"steps": 3}')
    assert main(["plot-training", str(bad), "--out", str(tmp_path / "x.png")]) != 0
    assert "notes.json: not a trainer's history file" in capsys.readouterr().err
