"""Model folder validation: every problem becomes a ``ModelLoadError`` that names the file.

mlx-lm's loader raises bare ``FileNotFoundError``/``ValueError`` (or crashes inside
``mx.load`` on a truncated file); we check the folder first so a person learns which file is
wrong and what to do, then hand the folder to mlx-lm.
"""

from __future__ import annotations

import importlib.util
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine_mlx.errors import ModelLoadError

# Architectures whose forward FlashChat drives layer by layer (explicit positions, masks,
# captured features). mlx-lm runs many more; these are the ones tested here.
ENGINE_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_5")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


@dataclass(frozen=True)
class ModelSpec:
    """What a validated folder holds, read from its config."""

    path: Path
    config: dict[str, Any]
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    max_context: int

    @property
    def name(self) -> str:
        return self.path.name


def read_config(path: Path) -> dict[str, Any]:
    """config.json as a dict, or a ModelLoadError that says what is wrong with it."""
    if not path.exists():
        raise ModelLoadError(f"Model folder {path} does not exist.")
    if not path.is_dir():
        raise ModelLoadError(f"{path} is a file, not a model folder (a .gguf needs importing).")
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise ModelLoadError(
            f"{path.name}: config.json is missing. A model folder needs config.json, "
            "model*.safetensors and a tokenizer; re-download or re-import the model."
        )
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path.name}/config.json is not valid JSON: {exc}") from exc
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelLoadError(f"{path.name}/config.json has no model_type.")
    return config


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config (multimodal Qwen3.5 nests it)."""
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def check_architecture(model_type: str, folder: str) -> None:
    """Refuse architectures neither mlx-lm nor the engine's forward can run."""
    from mlx_lm.utils import MODEL_REMAPPING

    mapped = MODEL_REMAPPING.get(model_type, model_type)
    if importlib.util.find_spec(f"mlx_lm.models.{mapped}") is None:
        raise ModelLoadError(
            f"{folder}: unknown architecture '{model_type}' in config.json. FlashChat runs "
            f"{', '.join(ENGINE_ARCHITECTURES)}."
        )
    if model_type not in ENGINE_ARCHITECTURES and mapped not in ENGINE_ARCHITECTURES:
        raise ModelLoadError(
            f"{folder}: architecture '{model_type}' is not supported by FlashChat's engine "
            f"yet (supported: {', '.join(ENGINE_ARCHITECTURES)})."
        )


def check_safetensors(file: Path) -> None:
    """Header sanity and size check, so a truncated download is named, not crashed on."""
    size = file.stat().st_size
    try:
        with file.open("rb") as fh:
            raw_len = fh.read(8)
            if len(raw_len) < 8:
                raise ValueError("file is shorter than a safetensors header")
            (header_len,) = struct.unpack("<Q", raw_len)
            if header_len > 100 << 20:
                raise ValueError(f"implausible header length {header_len:,}")
            if header_len > size - 8:
                raise ModelLoadError(
                    f"{file.parent.name}/{file.name} is truncated: {size:,} bytes on disk, "
                    "shorter than its own header; delete it and download again."
                )
            header = json.loads(fh.read(header_len))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelLoadError(
            f"{file.parent.name}/{file.name} is corrupt ({exc}); delete it and download again."
        ) from exc
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + header_len + end > size:
        raise ModelLoadError(
            f"{file.parent.name}/{file.name} is truncated: {size:,} bytes on disk, "
            f"{8 + header_len + end:,} expected; delete it and download again."
        )


def validate_model_folder(path: str | Path) -> ModelSpec:
    """Check a Hugging Face-layout folder before any weight is read."""
    path = Path(path).expanduser()
    config = read_config(path)
    model_type = str(config["model_type"])
    check_architecture(model_type, path.name)
    weights = sorted(path.glob("model*.safetensors"))
    if not weights:
        raise ModelLoadError(f"{path.name}: no model*.safetensors weight files found.")
    for file in weights:
        check_safetensors(file)
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ModelLoadError(
            f"{path.name}: no tokenizer (looked for {', '.join(TOKENIZER_FILES)})."
        )
    tc = text_config(config)
    try:
        return ModelSpec(
            path=path,
            config=config,
            model_type=model_type,
            num_layers=int(tc["num_hidden_layers"]),
            hidden_size=int(tc["hidden_size"]),
            vocab_size=int(tc["vocab_size"]),
            max_context=int(tc.get("max_position_embeddings") or 4096),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelLoadError(f"{path.name}/config.json lacks a required field: {exc}") from exc
