"""``quantize`` and ``import-gguf --quantize``: mlx-lm's quantized file (the one mlx-community
publishes), written whole or not at all, the library showing its bits and smaller size, and a
clear refusal for what cannot be quantized."""

from __future__ import annotations

import json

import pytest

from engine_mlx.cli import main
from engine_mlx.errors import ModelLoadError
from engine_mlx.library.catalog import describe
from engine_mlx.models.quantize import quantize_folder
from engine_mlx.models.target import TargetModel


def test_the_cli_writes_an_mlx_quantized_folder_beside_the_model(tiny_model_dir, tmp_path, capsys):
    source = tmp_path / "tiny"
    source.mkdir()
    for file in tiny_model_dir("qwen3").iterdir():
        (source / file.name).write_bytes(file.read_bytes())
    assert main(["quantize", str(source), "--bits", "8", "--group", "32"]) == 0
    out = tmp_path / "tiny-8bit"
    assert capsys.readouterr().out.strip().endswith(str(out))
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 8, "mode": "affine"}
    entry, original = describe(out), describe(source)
    assert entry.quantization == "8-bit, group 32"
    assert entry.size_bytes < original.size_bytes
    assert TargetModel.load(out).quantized_layers > 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no work left behind


def test_what_cannot_be_quantized_is_refused_with_a_reason(tiny_model_dir, tmp_path):
    source = tiny_model_dir("llama")
    once = quantize_folder(source, tmp_path / "q4", bits=4, group=32)
    with pytest.raises(ModelLoadError, match="quantized already"):
        quantize_folder(once, tmp_path / "again", bits=4)
    with pytest.raises(ModelLoadError, match="not empty"):
        quantize_folder(source, once, bits=8, group=32)
    with pytest.raises(ModelLoadError, match="bits 4 or 8"):
        quantize_folder(source, tmp_path / "q3", bits=3)
    with pytest.raises(ModelLoadError, match="does not exist"):
        quantize_folder(tmp_path / "missing", tmp_path / "q", bits=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q4"]


def test_a_failed_write_leaves_nothing(tiny_model_dir, tmp_path, monkeypatch):
    import mlx_lm.utils

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(mlx_lm.utils, "save", broken_save)
    with pytest.raises(ModelLoadError, match="disk full"):
        quantize_folder(tiny_model_dir("llama"), tmp_path / "q4", bits=4, group=32)
    assert list(tmp_path.iterdir()) == []
