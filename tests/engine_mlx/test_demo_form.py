"""The demo opens in the form that decodes fastest here: both forms timed once per machine,
the choice kept, a copied library on another CPU measured again."""

from __future__ import annotations

import json
import shutil

from engine_mlx import demo_form
from engine_mlx.models.quantize import default_destination


def _full_copy(tiny_model_dir, tmp_path):
    full = tmp_path / "models" / "Tiny"
    shutil.copytree(tiny_model_dir("qwen2"), full)
    return full


def test_the_faster_form_is_chosen_once_and_kept(tiny_model_dir, tmp_path, monkeypatch):
    full = _full_copy(tiny_model_dir, tmp_path)
    timed = []

    def speed(folder):
        timed.append(folder.name)
        return 30.0 if folder.name.endswith("-4bit") else 10.0

    monkeypatch.setattr(demo_form, "decode_speed", speed)
    chosen = demo_form.fastest_form(full)
    assert chosen == default_destination(full, 4) and (chosen / "config.json").is_file()
    assert sorted(timed) == ["Tiny", "Tiny-4bit"]
    record = json.loads((full.parent / demo_form.RECORD).read_text())
    assert record["choice"] == "Tiny-4bit" and record["tok_s"] == {"Tiny": 10.0, "Tiny-4bit": 30.0}
    assert demo_form.fastest_form(full) == chosen and len(timed) == 2  # kept, not re-timed


def test_full_precision_is_kept_where_it_is_faster(tiny_model_dir, tmp_path, monkeypatch):
    full = _full_copy(tiny_model_dir, tmp_path)
    monkeypatch.setattr(demo_form, "decode_speed", lambda f: 5.0 if "4bit" in f.name else 9.0)
    assert demo_form.fastest_form(full) == full


def test_another_machine_measures_again(tiny_model_dir, tmp_path, monkeypatch):
    full = _full_copy(tiny_model_dir, tmp_path)
    monkeypatch.setattr(demo_form, "decode_speed", lambda f: 5.0 if "4bit" in f.name else 9.0)
    demo_form.fastest_form(full)
    monkeypatch.setattr(demo_form, "cpu_signature", lambda: "another CPU")
    monkeypatch.setattr(demo_form, "decode_speed", lambda f: 50.0 if "4bit" in f.name else 9.0)
    assert demo_form.fastest_form(full).name == "Tiny-4bit"
    assert demo_form.fastest_form(full, measure=False).name == "Tiny-4bit"


def test_decode_speed_times_a_real_model(tiny_model_dir):
    assert demo_form.decode_speed(tiny_model_dir("llama")) > 0
