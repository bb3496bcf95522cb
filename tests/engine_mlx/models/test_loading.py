"""Broken model folders give errors that name the file and the problem."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine_mlx.errors import ModelLoadError
from engine_mlx.models.loading import validate_model_folder
from engine_mlx.models.target import TargetModel


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path) -> Path:
    dst = tmp_path / "model"
    shutil.copytree(tiny_model_dir("llama"), dst)
    return dst


def test_valid_folder_spec(model_copy):
    spec = validate_model_folder(model_copy)
    assert (spec.model_type, spec.num_layers, spec.max_context) == ("llama", 3, 512)


def test_missing_folder(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        TargetModel.load(tmp_path / "nowhere")


def test_missing_config(model_copy):
    (model_copy / "config.json").unlink()
    with pytest.raises(ModelLoadError, match=r"config\.json is missing"):
        TargetModel.load(model_copy)


def test_config_not_json(model_copy):
    (model_copy / "config.json").write_text("{ not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        TargetModel.load(model_copy)


def test_unknown_architecture(model_copy):
    cfg = json.loads((model_copy / "config.json").read_text())
    cfg["model_type"] = "frobnicator"
    (model_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="unknown architecture 'frobnicator'"):
        TargetModel.load(model_copy)


def test_truncated_safetensors(model_copy):
    weights = model_copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match=r"model\.safetensors is truncated"):
        TargetModel.load(model_copy)


def test_garbage_safetensors(model_copy):
    (model_copy / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ModelLoadError, match=r"model\.safetensors is corrupt"):
        TargetModel.load(model_copy)


def test_missing_weights_and_tokenizer(model_copy):
    (model_copy / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match="no tokenizer"):
        TargetModel.load(model_copy)
    (model_copy / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="no model"):
        TargetModel.load(model_copy)


def test_weights_not_matching_config(model_copy):
    cfg = json.loads((model_copy / "config.json").read_text())
    cfg["hidden_size"] = 96
    (model_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="could not load"):
        TargetModel.load(model_copy)
