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
from engine_mlx.models.metadata import check_config, check_safetensors_header

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
    """config.json as a checked dict (``metadata.check_config``), or a ModelLoadError that
    says what is wrong with it."""
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
    except (ValueError, UnicodeDecodeError) as exc:  # ValueError: JSON, and huge numbers
        raise ModelLoadError(f"{path.name}/config.json is not valid JSON: {exc}") from exc
    except OSError as exc:
        raise ModelLoadError(f"{path.name}/config.json cannot be read: {exc}") from exc
    return check_config(config, f"{path.name}/config.json")


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


def read_safetensors_header(file: Path) -> dict[str, dict[str, Any]]:
    """The tensors a safetensors file describes (name -> dtype, shape, offsets), once its
    header is well formed (``metadata.check_safetensors_header``) and every byte it
    describes is on disk; ModelLoadError naming the file otherwise."""
    label = f"{file.parent.name}/{file.name}"
    try:
        size = file.stat().st_size
        with file.open("rb") as fh:
            raw_len = fh.read(8)
            if len(raw_len) < 8:
                raise ValueError("file is shorter than a safetensors header")
            (header_len,) = struct.unpack("<Q", raw_len)
            if header_len > 100 << 20:
                raise ValueError(f"implausible header length {header_len:,}")
            if header_len > size - 8:
                raise ModelLoadError(
                    f"{label} is truncated: {size:,} bytes on disk, shorter than its own "
                    "header; delete it and download again."
                )
            header = json.loads(fh.read(header_len))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ModelLoadError(f"{label} is corrupt ({exc}); delete it and download again.") from exc
    except OSError as exc:
        raise ModelLoadError(f"{label} cannot be read: {exc}") from exc
    tensors, end = check_safetensors_header(header, label)
    if 8 + header_len + end > size:
        raise ModelLoadError(
            f"{label} is truncated: {size:,} bytes on disk, {8 + header_len + end:,} "
            "expected; delete it and download again."
        )
    return tensors


def check_safetensors(file: Path) -> None:
    """Header sanity and size check, so a truncated download is named, not crashed on."""
    read_safetensors_header(file)


def validate_model_folder(path: str | Path) -> ModelSpec:
    """Check a Hugging Face-layout folder before any weight is read."""
    path = Path(path).expanduser()
    config = read_config(path)
    model_type = config.get("model_type")
    if model_type is None:
        raise ModelLoadError(f"{path.name}/config.json has no model_type.")
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
    layers, hidden, vocab, context = target_sizes(config, f"{path.name}/config.json")
    return ModelSpec(
        path=path,
        config=config,
        model_type=model_type,
        num_layers=layers,
        hidden_size=hidden,
        vocab_size=vocab,
        max_context=context,
    )


REQUIRED_SIZES = ("num_hidden_layers", "hidden_size", "vocab_size", "num_attention_heads")


def target_sizes(config: dict[str, Any], where: str) -> tuple[int, int, int, int]:
    """(layers, hidden size, vocabulary, context) of a checked target config; ModelLoadError
    naming the first missing field (the hub inspection asks before downloading)."""
    tc = text_config(config)
    missing = [name for name in REQUIRED_SIZES if tc.get(name) is None]
    if missing:
        raise ModelLoadError(f"{where} lacks a required field: {missing[0]}.")
    heads, kv_heads = tc["num_attention_heads"], tc.get("num_key_value_heads") or 1
    if tc.get("head_dim") is None and tc["hidden_size"] % heads:
        raise ModelLoadError(
            f"{where}: hidden_size {tc['hidden_size']} is not a multiple of "
            f"num_attention_heads {heads} (and no head_dim is given)."
        )
    if heads % kv_heads:
        raise ModelLoadError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
            f"{kv_heads}."
        )
    context = tc.get("max_position_embeddings") or 4096
    return tc["num_hidden_layers"], tc["hidden_size"], tc["vocab_size"], context
