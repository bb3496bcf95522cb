"""Untrusted model metadata, checked once, for every path that reads it.

``config.json`` and safetensors headers come from downloads, copies and hand-edited folders.
The library lists them, the hub inspection plans a download from them, the loader builds a
model from them. Each used to parse what it needed in its own way, so one bad value failed
differently in each place (``int("abc")`` in one, a dotted ``model_type`` turned into a
module import in another, a header of the wrong JSON shape in a third). These checks are the
single gate: they return the value when it is well formed and raise ``ModelLoadError`` naming
the file and the field otherwise. They check types and ranges only; whether a model fits a
drafter, or runs on this engine, is decided elsewhere from values that passed here.
"""

from __future__ import annotations

import math
import re
from typing import Any

from engine_mlx.errors import ModelLoadError

MODEL_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
"""mlx-lm module names: no dot or slash, so a model type can never name another module."""

SIZE_FIELDS: dict[str, tuple[int, int]] = {
    "hidden_size": (1, 1 << 17),
    "num_hidden_layers": (1, 4096),
    "num_attention_heads": (1, 4096),
    "num_key_value_heads": (1, 4096),
    "head_dim": (1, 4096),
    "intermediate_size": (1, 1 << 20),
    "vocab_size": (1, 1 << 24),
    "max_position_embeddings": (1, 1 << 26),
    "num_target_layers": (0, 4096),
    "block_size": (1, 4096),
    "full_attention_interval": (0, 4096),
}
"""Whole-number fields and their inclusive ranges: wide enough for every published model
(the largest vocabulary is ~262k, contexts reach ~10M), narrow enough that no size overflows
the int32 shapes MLX uses or asks for a petabyte."""

FLOAT_FIELDS = ("rms_norm_eps", "layer_norm_eps", "rope_theta")
DICT_FIELDS = ("rope_scaling", "quantization", "quantization_config", "dflash_config")
STRING_LIST_FIELDS = ("architectures", "layer_types")
TOKEN_FIELDS = ("eos_token_id", "bos_token_id", "pad_token_id", "mask_token_id")

SAFETENSORS_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
}


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fail(where: str, field: str, problem: str, value: Any) -> ModelLoadError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return ModelLoadError(
        f"{where}: '{field}' {problem}, not {shown}. The file is damaged or not a model "
        "FlashChat runs: re-download the model, or remove it from the library."
    )


def check_config(config: Any, where: str) -> dict[str, Any]:
    """``config`` when every field FlashChat or mlx-lm reads has a usable type and range;
    ModelLoadError otherwise. Fields are checked when present: which of them a target or a
    drafter needs is the loader's question."""
    if not isinstance(config, dict):
        raise ModelLoadError(f"{where} is not a JSON object.")
    model_type = config.get("model_type")
    if model_type is not None and (
        not isinstance(model_type, str) or not MODEL_TYPE.match(model_type)
    ):
        raise _fail(where, "model_type", "must be an architecture name like 'qwen2'", model_type)
    _check_fields(config, where)
    inner = config.get("text_config")
    if inner is not None:
        if not isinstance(inner, dict):
            raise _fail(where, "text_config", "must be an object", inner)
        inner_type = inner.get("model_type")
        if inner_type is not None and (
            not isinstance(inner_type, str) or not MODEL_TYPE.match(inner_type)
        ):
            raise _fail(where, "text_config.model_type", "must be an architecture name", inner_type)
        _check_fields(inner, where, prefix="text_config.")
    return config


def _check_fields(config: dict[str, Any], where: str, prefix: str = "") -> None:
    for field, (low, high) in SIZE_FIELDS.items():
        value = config.get(field)
        if value is not None and (not _whole(value) or not low <= value <= high):
            raise _fail(
                where, prefix + field, f"must be a whole number from {low} to {high:,}", value
            )
    for field in FLOAT_FIELDS:
        value = config.get(field)
        if value is not None and (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
            or value < 0
        ):
            raise _fail(where, prefix + field, "must be a non-negative number", value)
    for field in DICT_FIELDS:
        value = config.get(field)
        if value is not None and not isinstance(value, dict):
            raise _fail(where, prefix + field, "must be an object", value)
    for field in STRING_LIST_FIELDS:
        value = config.get(field)
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(v, str) for v in value)
        ):
            raise _fail(where, prefix + field, "must be a list of names", value)
    for field in TOKEN_FIELDS:
        value = config.get(field)
        ids = value if isinstance(value, list) else [value]
        # -1 is how some older configs say "none" (pad_token_id of early Llama conversions)
        if value is not None and not all(_whole(i) and -1 <= i < 1 << 31 for i in ids):
            raise _fail(where, prefix + field, "must be a token id or a list of them", value)
    tie = config.get("tie_word_embeddings")
    if tie is not None and not isinstance(tie, bool):
        raise _fail(where, prefix + "tie_word_embeddings", "must be true or false", tie)
    quant = config.get("quantization")
    if isinstance(quant, dict):
        for key in ("bits", "group_size"):
            value = quant.get(key)
            if value is not None and (not _whole(value) or not 1 <= value <= 1024):
                raise _fail(where, f"{prefix}quantization.{key}", "must be a small number", value)
    draft = config.get("dflash_config")
    ids = (draft or {}).get("target_layer_ids", config.get("target_layer_ids"))
    if ids is not None and (
        not isinstance(ids, list) or not all(_whole(i) and 0 <= i < 4096 for i in ids)
    ):
        raise _fail(where, prefix + "target_layer_ids", "must be a list of layer numbers", ids)
    for key in ("mask_token_id", "local_conv_kernel"):
        value = (draft or {}).get(key)
        if value is not None and (not _whole(value) or not 0 <= value < 1 << 31):
            raise _fail(where, f"{prefix}dflash_config.{key}", "must be a whole number", value)


def check_safetensors_header(header: Any, where: str) -> tuple[dict[str, dict[str, Any]], int]:
    """(tensors by name, bytes of tensor data the header describes) when the header is a
    well-formed safetensors header; ModelLoadError otherwise. Every tensor must have a known
    dtype, a shape of whole numbers, and data offsets that hold exactly its bytes."""
    if not isinstance(header, dict):
        raise ModelLoadError(f"{where} is corrupt: its header is not a JSON object.")
    meta = header.get("__metadata__")
    if meta is not None and (
        not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values())
    ):
        raise ModelLoadError(f"{where} is corrupt: its __metadata__ is not a map of strings.")
    tensors: dict[str, dict[str, Any]] = {}
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise ModelLoadError(f"{where} is corrupt: tensor '{name[:80]}' has no description.")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        width = SAFETENSORS_DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
        if width is None:
            raise ModelLoadError(
                f"{where}: tensor '{name[:80]}' has an unknown dtype {str(dtype)[:20]!r}."
            )
        if (
            not isinstance(shape, list)
            or len(shape) > 8
            or not all(_whole(d) and 0 <= d < 1 << 40 for d in shape)
        ):
            raise ModelLoadError(f"{where} is corrupt: tensor '{name[:80]}' has a bad shape.")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_whole(o) and 0 <= o < 1 << 50 for o in offsets)
            or offsets[0] > offsets[1]
        ):
            raise ModelLoadError(f"{where} is corrupt: tensor '{name[:80]}' has bad data offsets.")
        if offsets[1] - offsets[0] != math.prod(shape) * width:
            raise ModelLoadError(
                f"{where} is corrupt: tensor '{name[:80]}' of shape {shape} holds "
                f"{offsets[1] - offsets[0]:,} bytes, not {math.prod(shape) * width:,}."
            )
        tensors[name] = info
        end = max(end, offsets[1])
    return tensors, end
