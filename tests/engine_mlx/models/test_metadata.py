"""The single check of untrusted config.json and safetensors headers, and fuzzing of every
path that reads them (validate, list, install, load): a FlashChat error with a message, or
success, never another exception."""

from __future__ import annotations

import json
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_mlx.errors import EngineError, ModelLoadError
from engine_mlx.library.catalog import list_installed
from engine_mlx.library.classify import classify_folder
from engine_mlx.models.loading import read_safetensors_header, validate_model_folder
from engine_mlx.models.metadata import check_config, check_safetensors_header
from engine_mlx.models.target import TargetModel
from tests.conftest import ARCHS

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
CONFIG_FIELDS = [
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "tie_word_embeddings",
    "architectures",
    "eos_token_id",
    "quantization",
    "text_config",
    "layer_types",
    "torch_dtype",
]
FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_tiny_architecture_passes(tiny_model_dir: Callable[[str], Path], arch: str) -> None:
    config = json.loads((tiny_model_dir(arch) / "config.json").read_text())
    assert check_config(config, "config.json") is config


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": "abc"}, "'hidden_size' must be a whole number"),
        ({"hidden_size": True}, "'hidden_size' must be a whole number"),
        ({"vocab_size": 2**31}, "'vocab_size' must be a whole number from 1 to"),
        ({"model_type": "qwen2.x"}, "'model_type' must be an architecture name"),
        ({"model_type": "../llama"}, "'model_type' must be an architecture name"),
        ({"rms_norm_eps": float("inf")}, "'rms_norm_eps' must be a non-negative number"),
        ({"text_config": "x"}, "'text_config' must be an object"),
        ({"text_config": {"hidden_size": -1}}, "'text_config.hidden_size'"),
        ({"eos_token_id": "2"}, "'eos_token_id' must be a token id"),
        ({"architectures": "LlamaForCausalLM"}, "'architectures' must be a list of names"),
        ({"dflash_config": {"target_layer_ids": [1, "x"]}}, "'target_layer_ids'"),
    ],
)
def test_bad_fields_are_named(change: dict, message: str) -> None:
    config = {"model_type": "qwen2", "hidden_size": 64, **change}
    with pytest.raises(ModelLoadError, match=message):
        check_config(config, "m/config.json")


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ([], "not a JSON object"),
        ({"w": [1]}, "has no description"),
        ({"w": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}}, "unknown dtype"),
        ({"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}}, "bad shape"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, "bad data offsets"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, "holds 4 bytes, not 8"),
        ({"__metadata__": {"a": 1}}, "__metadata__"),
    ],
)
def test_bad_safetensors_headers_are_named(header: Any, message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        check_safetensors_header(header, "m/model.safetensors")


def _assert_every_reader_copes(folder: Path, *, load: bool) -> None:
    """Each path that reads a model folder ends in an EngineError or in success."""
    readers: list[Callable[[], object]] = [
        lambda: validate_model_folder(folder),
        lambda: classify_folder(folder),
        lambda: [read_safetensors_header(f) for f in folder.glob("*.safetensors")],
    ]
    if load:
        readers.append(lambda: TargetModel.load(folder))
    for read in readers:
        try:
            read()
        except EngineError as exc:
            assert str(exc).strip()
    (model,) = list_installed(folder.parent)  # listing never raises, never drops it
    assert model.name == folder.name


SMALL = st.integers(-3, 300) | st.sampled_from(["x", None, 1.5, [], {}, True])


@pytest.mark.slow
@FUZZ
@given(changes=st.dictionaries(st.sampled_from(CONFIG_FIELDS), JSON, min_size=1, max_size=4))
def test_fuzzed_config_fields_never_escape_as_other_exceptions(
    tiny_model_dir: Callable[[str], Path], changes: dict[str, Any]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = shutil.copytree(tiny_model_dir("qwen3"), Path(tmp) / "m")
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **changes}))
        _assert_every_reader_copes(folder, load=False)


@FUZZ
@given(
    changes=st.dictionaries(
        st.sampled_from(["hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim"])
        | st.sampled_from(["vocab_size", "intermediate_size", "num_hidden_layers"])
        | st.sampled_from(["rope_scaling", "rms_norm_eps", "rope_theta", "tie_word_embeddings"]),
        SMALL | JSON.filter(lambda v: not isinstance(v, int)),
        min_size=1,
        max_size=3,
    ),
    arch=st.sampled_from(ARCHS),
)
@pytest.mark.slow
def test_fuzzed_configs_load_or_fail_with_a_message(
    tiny_model_dir: Callable[[str], Path], changes: dict[str, Any], arch: str
) -> None:
    """Loading too: sizes stay small here, so a config that passes the check cannot ask
    MLX for more memory than the machine has."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = shutil.copytree(tiny_model_dir(arch), Path(tmp) / "m")
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **changes}))
        _assert_every_reader_copes(folder, load=True)


@pytest.mark.slow
@FUZZ
@given(config=JSON)
def test_any_json_as_config(tiny_model_dir: Callable[[str], Path], config: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = shutil.copytree(tiny_model_dir("llama"), Path(tmp) / "m")
        (folder / "config.json").write_text(json.dumps(config))
        _assert_every_reader_copes(folder, load=True)


TENSOR = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["F32", "F16", "BF16", "I8", "BOOL", "F8_E4M3", "X"]) | JSON,
        "shape": st.lists(st.integers(-2, 64), max_size=3) | JSON,
        "data_offsets": st.lists(st.integers(-4, 600), min_size=2, max_size=2) | JSON,
    }
)
HEADERS = (
    st.dictionaries(st.sampled_from(["model.embed_tokens.weight", "mtp.fc.weight", "w"]), TENSOR)
    | st.dictionaries(st.text(max_size=6), JSON, max_size=3)
    | JSON
)


@FUZZ
@given(
    header=HEADERS, data=st.binary(max_size=600), raw_length=st.none() | st.integers(0, 2**64 - 1)
)
@pytest.mark.slow
def test_fuzzed_safetensors_headers(
    tiny_model_dir: Callable[[str], Path], header: Any, data: bytes, raw_length: int | None
) -> None:
    raw = json.dumps(header).encode()
    length = len(raw) if raw_length is None else raw_length
    with tempfile.TemporaryDirectory() as tmp:
        folder = shutil.copytree(tiny_model_dir("qwen3"), Path(tmp) / "m")
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", length) + raw + data)
        _assert_every_reader_copes(folder, load=True)
