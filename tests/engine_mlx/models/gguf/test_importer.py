"""import_gguf end to end: the finished folder, idempotence, atomicity, errors, SmolLM2."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T

from engine_mlx.demo import SMOLLM2
from engine_mlx.errors import GGUFImportError
from engine_mlx.models.gguf import MARKER_NAME, import_gguf, importer, is_imported
from tests.engine_mlx.models.gguf.synthetic import (
    BOS,
    CHAT_TEMPLATE,
    CONTEXT,
    EOS,
    FFN,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    KV_HEADS,
    LAYERS,
    MLX_TYPES,
    PAD,
    SAMPLES,
    encode_tensors,
    leftovers,
    load_weights,
    read_json,
    write_gguf,
)

# ------------------------------------------------------------------------------------------
# The finished folder
# ------------------------------------------------------------------------------------------


def test_tiny_config_and_side_files(tiny_import: SimpleNamespace, tiny_vocab: dict) -> None:
    folder = tiny_import.folder
    config = read_json(folder / "config.json")
    tied = tiny_import.variant == "numpy"
    assert config["model_type"] == "llama"
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert {
        k: config[k]
        for k in (
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
            "vocab_size",
        )
    } == {
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": CONTEXT,
        "vocab_size": len(tiny_vocab["tokens"]),
    }
    assert config["rms_norm_eps"] == 1e-5
    assert config["rope_theta"] == 10000.0
    assert config["tie_word_embeddings"] is tied
    assert config["torch_dtype"] == "float32"
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (
        BOS,
        EOS,
        PAD,
    )
    if tied:  # this variant carries a Llama 3 rope_freqs table
        assert config["rope_scaling"] == {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        }
    else:
        assert config["rope_scaling"] is None

    tok_config = read_json(folder / "tokenizer_config.json")
    assert tok_config["chat_template"] == CHAT_TEMPLATE
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tok_config["bos_token"] == "<|im_start|>"
    assert tok_config["eos_token"] == "<|im_end|>"
    assert tok_config["unk_token"] == "<|endoftext|>"
    assert tok_config["pad_token"] == "<|im_end|>"
    assert tok_config["add_bos_token"] is False
    assert read_json(folder / "special_tokens_map.json")["eos_token"] == "<|im_end|>"
    gen = read_json(folder / "generation_config.json")
    assert (gen["bos_token_id"], gen["eos_token_id"]) == (BOS, EOS)

    marker = read_json(folder / MARKER_NAME)
    assert marker["source_name"] == tiny_import.gguf.name
    assert marker["source_size"] == tiny_import.gguf.stat().st_size
    assert marker["dtype"] == "float32"
    assert marker["format_version"] == importer.FORMAT_VERSION
    assert is_imported(folder, tiny_import.gguf, "float32")
    assert not is_imported(folder, tiny_import.gguf, "float16")


def test_tiny_loads_in_mlx_lm(tiny_import: SimpleNamespace) -> None:
    import mlx_lm

    model, tokenizer = mlx_lm.load(str(tiny_import.folder))
    for text in SAMPLES:
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi 123"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt == "<|im_start|>user\nHi 123<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    assert ids[0] == BOS
    logits = model(mx.array([ids]))
    assert logits.shape == (1, len(ids), model.args.vocab_size)
    assert bool(mx.all(mx.isfinite(logits)).item())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tiny_dtypes(tmp_path: Path, tiny_ggufs: dict[str, tuple[Path, dict]], dtype: str) -> None:
    path, expected = tiny_ggufs["numpy"]
    out = import_gguf(path, tmp_path / "m", dtype=dtype)
    arrays = mx.load(str(out / "model.safetensors"))
    assert {str(a.dtype) for a in arrays.values()} == {f"mlx.core.{dtype}"}  # norms too
    target = getattr(mx, dtype)
    for name, ref in expected.items():
        want = np.array(mx.array(ref).astype(target).astype(mx.float32))
        assert np.array_equal(np.array(arrays[name].astype(mx.float32)), want), name
    assert read_json(out / "config.json")["torch_dtype"] == dtype


def test_large_models_are_sharded(
    tmp_path: Path, tiny_ggufs: dict[str, tuple[Path, dict]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlx_lm

    monkeypatch.setattr(importer, "_SHARD_BYTES", 64 * 1024)
    path, expected = tiny_ggufs["mlx"]
    out = import_gguf(path, tmp_path / "sharded", dtype="float32")
    shards = sorted(p.name for p in out.glob("model-*.safetensors"))
    assert len(shards) > 2 and not (out / "model.safetensors").exists()
    index = read_json(out / "model.safetensors.index.json")
    assert set(index["weight_map"]) == set(expected)
    assert set(index["weight_map"].values()) == set(shards)
    got = load_weights(out)
    assert all(np.array_equal(got[k], v) for k, v in expected.items())
    mlx_lm.load(str(out))
    assert is_imported(out, path, "float32")


# ------------------------------------------------------------------------------------------
# Idempotence and atomicity
# ------------------------------------------------------------------------------------------


def test_second_import_is_a_no_op_and_changes_trigger_a_redo(
    tmp_path: Path, mlx_gguf: Path
) -> None:
    out = tmp_path / "m"
    import_gguf(mlx_gguf, out, dtype="float32")
    marker = out / MARKER_NAME
    stamp = marker.stat().st_mtime_ns
    inode = (out / "model.safetensors").stat().st_ino
    t0 = time.perf_counter()
    assert import_gguf(mlx_gguf, out, dtype="float32") == out
    assert time.perf_counter() - t0 < 0.5
    assert marker.stat().st_mtime_ns == stamp
    assert (out / "model.safetensors").stat().st_ino == inode

    import_gguf(mlx_gguf, out, dtype="float16")  # other dtype: redone in place
    assert read_json(marker)["dtype"] == "float16"
    assert is_imported(out, mlx_gguf, "float16")

    os.utime(mlx_gguf, ns=(time.time_ns(), time.time_ns() + 10**9))  # GGUF replaced/touched
    assert not is_imported(out, mlx_gguf, "float16")
    (out / "tokenizer.json").unlink()  # a damaged folder is not "imported" either
    assert not is_imported(out, mlx_gguf, "float16")
    import_gguf(mlx_gguf, out, dtype="float16")
    assert is_imported(out, mlx_gguf, "float16")
    assert leftovers(tmp_path) == []


def test_interrupted_import_is_redone(tmp_path: Path, mlx_gguf: Path) -> None:
    """A killed import leaves only its hidden work folder; the next import cleans it up."""
    out = tmp_path / "m"
    stale = tmp_path / f".m.importing-{2**22 + 12345}-deadbeef"  # from a killed process
    stale.mkdir()
    (stale / "config.json").write_text('{"model_type": "lla')  # half-written
    assert not is_imported(out, mlx_gguf, "float16")
    import_gguf(mlx_gguf, out)
    assert read_json(out / "config.json")["model_type"] == "llama"
    assert is_imported(out, mlx_gguf, "float16")
    assert leftovers(tmp_path) == []


def test_never_replaces_a_model_folder_it_did_not_write(
    tmp_path: Path, mlx_gguf: Path, tiny_model_dir: Callable[[str], Path]
) -> None:
    """Regression: a real model folder (standard Hugging Face names, no import marker) was
    taken for a half-finished import and replaced."""
    import shutil

    out = tmp_path / "someones_model"
    shutil.copytree(tiny_model_dir("qwen3"), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(GGUFImportError, match=r"tiny\.gguf.*someones_model.*did not write"):
        import_gguf(mlx_gguf, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert leftovers(tmp_path) == []


def test_replaces_an_earlier_import_but_not_files_added_to_it(
    tmp_path: Path, mlx_gguf: Path
) -> None:
    out = import_gguf(mlx_gguf, tmp_path / "m", dtype="float32")
    import_gguf(mlx_gguf, out, dtype="float16")  # ours, listed in the marker: replaced
    assert is_imported(out, mlx_gguf, "float16")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(GGUFImportError, match=r"notes\.txt"):
        import_gguf(mlx_gguf, out, dtype="float32")
    assert (out / "notes.txt").read_text() == "mine"
    assert is_imported(out, mlx_gguf, "float16")


def test_failed_import_leaves_nothing_and_keeps_the_previous_one(
    tmp_path: Path, mlx_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(*args: object, **kwargs: object) -> list[str]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(importer, "_write_weights", disk_full)
    with pytest.raises(GGUFImportError, match=r"tiny\.gguf.*No space left"):
        import_gguf(mlx_gguf, tmp_path / "fresh")
    assert not (tmp_path / "fresh").exists()
    assert leftovers(tmp_path) == []

    monkeypatch.undo()
    out = import_gguf(mlx_gguf, tmp_path / "kept", dtype="float32")
    monkeypatch.setattr(importer, "_write_weights", disk_full)
    with pytest.raises(GGUFImportError):
        import_gguf(mlx_gguf, out, dtype="float16")
    assert is_imported(out, mlx_gguf, "float32")  # the earlier import is untouched
    assert leftovers(tmp_path) == []


def test_refuses_to_overwrite_a_foreign_folder(tmp_path: Path, mlx_gguf: Path) -> None:
    out = tmp_path / "Documents"
    out.mkdir()
    (out / "thesis.docx").write_text("precious")
    with pytest.raises(GGUFImportError, match=r"tiny\.gguf.*thesis\.docx"):
        import_gguf(mlx_gguf, out)
    assert (out / "thesis.docx").read_text() == "precious"
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(GGUFImportError, match="not a folder"):
        import_gguf(mlx_gguf, a_file)


# ------------------------------------------------------------------------------------------
# Bad inputs: each names the file and the problem
# ------------------------------------------------------------------------------------------


def _variant(tmp: Path, vocab: dict, hf: dict, name: str, **kw: Any) -> Path:
    """The mx-native tiny GGUF with one thing changed (write_gguf keywords or drop_tensor)."""
    payloads, _ = encode_tensors(hf, MLX_TYPES)
    drop = kw.pop("drop_tensor", None)
    if drop:
        del payloads[drop]
    return write_gguf(tmp / name, vocab, payloads, **kw)


def _bytes_file(tmp: Path, name: str, data: bytes) -> Path:
    (tmp / name).write_bytes(data)
    return tmp / name


def _directory(tmp: Path, vocab: dict, hf: dict, good: Path) -> Path:
    (tmp / "dir.gguf").mkdir()
    return tmp / "dir.gguf"


def _not_gguf(tmp: Path, vocab: dict, hf: dict, good: Path) -> Path:
    return _bytes_file(tmp, "random.gguf", b"\x7fELF" + np.random.default_rng(3).bytes(4092))


def _truncated_data(tmp: Path, vocab: dict, hf: dict, good: Path) -> Path:
    return _bytes_file(tmp, "half.gguf", good.read_bytes()[: good.stat().st_size // 2])


def _truncated_header(tmp: Path, vocab: dict, hf: dict, good: Path) -> Path:
    return _bytes_file(tmp, "head.gguf", good.read_bytes()[:300])


def _q8_1_tensor(tmp: Path, vocab: dict, hf: dict, good: Path) -> Path:
    """blk.1.ffn_up stored as Q8_1, a type nothing here can dequantize."""
    payloads, _ = encode_tensors(hf, MLX_TYPES)
    block, size = GGML_QUANT_SIZES[T.Q8_1]
    payloads["blk.1.ffn_up.weight"] = (np.zeros((FFN, HIDDEN // block * size), np.uint8), T.Q8_1)
    return write_gguf(tmp / "q81.gguf", vocab, payloads)


BadMaker = Callable[[Path, dict, dict, Path], Path]
BAD_INPUTS: dict[str, tuple[BadMaker, str]] = {
    "missing": (lambda t, v, h, g: t / "nope.gguf", "not found"),
    "directory": (_directory, "not a file"),
    "empty": (lambda t, v, h, g: _bytes_file(t, "empty.gguf", b""), "is empty"),
    "not gguf": (_not_gguf, "is not a GGUF file"),
    "truncated data": (
        _truncated_data,
        r"truncated: expected [\d,]+ bytes of tensor data, found [\d,]+",
    ),
    "truncated header": (_truncated_header, "is truncated"),
    "architecture": (
        lambda t, v, h, g: _variant(t, v, h, "mamba.gguf", arch="mamba"),
        "architecture 'mamba'",
    ),
    "tensor type": (_q8_1_tensor, "'blk.1.ffn_up.weight' has type Q8_1"),
    "missing tensor": (
        lambda t, v, h, g: _variant(t, v, h, "holey.gguf", drop_tensor="blk.1.ffn_up.weight"),
        "missing tensor 'blk.1.ffn_up.weight'",
    ),
    "missing metadata": (
        lambda t, v, h, g: _variant(t, v, h, "nometa.gguf", drop_meta=("head_count",)),
        "missing metadata 'llama.attention.head_count'",
    ),
    "sentencepiece": (
        lambda t, v, h, g: _variant(t, v, h, "spm.gguf", tokenizer_model="llama"),
        "'llama' tokenizer",
    ),
    "unknown pre-tokenizer": (
        lambda t, v, h, g: _variant(t, v, h, "pre.gguf", pre="made-up-pre"),
        "pre-tokenizer 'made-up-pre'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_inputs_raise_gguf_import_error_naming_the_file(
    case: str,
    tmp_path: Path,
    mlx_gguf: Path,
    tiny_vocab: dict,
    hf_weights: dict,
) -> None:
    make, problem = BAD_INPUTS[case]
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    path = make(bad_dir, tiny_vocab, hf_weights, mlx_gguf)
    out = tmp_path / "out"
    with pytest.raises(GGUFImportError) as info:
        import_gguf(path, out)
    message = str(info.value)
    assert path.name in message
    assert re.search(problem, message), message
    assert not out.exists()
    assert leftovers(tmp_path) == []
    assert not is_imported(out, path)


def test_bad_dtype_is_reported(tmp_path: Path, mlx_gguf: Path) -> None:
    with pytest.raises(GGUFImportError, match=r"tiny\.gguf.*'int8'"):
        import_gguf(mlx_gguf, tmp_path / "m", dtype="int8")


# ------------------------------------------------------------------------------------------
# The real SmolLM2-135M-Instruct GGUF (smollm2_gguf and smollm2_dir: tests/conftest.py)
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def smollm2(smollm2_dir: Path) -> tuple[Any, Any]:
    """mlx-lm's own load of the library copy, computed in float32: MLX's CPU has no fast
    float16 path (12 tokens took 295 s in float16, as the checkpoint's scales are)."""
    import mlx_lm

    model, tokenizer = mlx_lm.load(str(smollm2_dir))[:2]
    model.set_dtype(mx.float32)  # floating parameters only: the packed weights stay
    return model, tokenizer


@pytest.mark.slow
def test_smollm2_config(smollm2_dir: Path) -> None:
    config = read_json(smollm2_dir / "config.json")
    assert config["num_hidden_layers"] == 30
    assert (config["hidden_size"], config["intermediate_size"]) == (576, 1536)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)
    assert config["head_dim"] == 64
    assert config["vocab_size"] == 49152
    assert config["max_position_embeddings"] == 8192
    assert config["tie_word_embeddings"] is True
    assert (config["rope_theta"], config["rms_norm_eps"]) == (100000.0, 1e-5)
    assert (config["bos_token_id"], config["eos_token_id"]) == (1, 2)
    assert "lm_head.weight" not in mx.load(str(smollm2_dir / "model.safetensors"))


@pytest.mark.slow
def test_smollm2_tokenizer_and_template(smollm2: tuple[Any, Any]) -> None:
    _model, tokenizer = smollm2
    text = "Hello, world! 1234 ünïcödé"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    digits = [tokenizer.decode([i]) for i in tokenizer.encode("1234", add_special_tokens=False)]
    assert digits == ["1", "2", "3", "4"]  # the "smollm" pre-tokenizer splits digits
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False
    )
    assert "<|im_start|>user\nHi<|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    assert tokenizer.encode("<|im_start|>", add_special_tokens=False) == [1]
    assert tokenizer.eos_token_id == 2


@pytest.mark.slow
def test_smollm2_knows_the_capital_of_france(smollm2: tuple[Any, Any]) -> None:
    """Greedy answer mentions Paris: only true if the Q/K un-permutation is right."""
    import mlx_lm

    model, tokenizer = smollm2
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    answer = mlx_lm.generate(model, tokenizer, prompt, max_tokens=12)
    assert "Paris" in answer, answer


@pytest.mark.slow
def test_smollm2_reimport_is_instant(smollm2_gguf: Path, smollm2_dir: Path) -> None:
    stamp = (smollm2_dir / MARKER_NAME).stat().st_mtime_ns
    t0 = time.perf_counter()
    import_gguf(smollm2_gguf, smollm2_dir, dtype=SMOLLM2.dtype)
    assert time.perf_counter() - t0 < 0.5
    assert (smollm2_dir / MARKER_NAME).stat().st_mtime_ns == stamp


def test_import_gguf_quantize_writes_an_mlx_quantized_model(mlx_gguf, tmp_path, capsys):
    from engine_mlx.cli import main
    from engine_mlx.models.target import TargetModel

    out = tmp_path / "lib" / "tiny-4bit"
    assert main(["import-gguf", str(mlx_gguf), str(out), "--quantize", "4"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"]["bits"] == 4
    assert TargetModel.load(out).quantized_layers > 0
    assert [p.name for p in out.parent.iterdir()] == ["tiny-4bit"]  # the scratch import is gone
