"""A drafter that ``export-drafter --format hf`` wrote, converted by llama.cpp's own
``convert_hf_to_gguf.py --target-model-dir``, loads back here with identical tensors, and the
converter's GGUF is FlashChat's own ``write_drafter_gguf`` output: the same tensor names,
shapes, types and bytes, and the same ``dflash.*`` and ``tokenizer.*`` keys, values and types.

The converter runs in the venv ``scripts/setup_llama_converter.sh`` makes (it needs torch;
``make test`` runs the script; FLASHCHAT_LLAMA_CONVERTER names another one). Where no CPU
build of torch exists the script leaves the reason in ``.unavailable`` and the test skips
with it. The tiny Qwen3 target carries a SentencePiece ``tokenizer.model``: the converter
takes a byte-level BPE only when it knows the pre-tokenizer's hash (a real model's), and
Qwen's vocabulary path tries ``tokenizer.model`` first. Its GGUF, converted the same way,
is what FlashChat's writer copies the tokenizer from.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGUFReader
from mlx.utils import tree_flatten

from engine_mlx.models.dflash import DFlashConfig, DFlashModel, save_dflash
from engine_mlx.models.drafters import load_drafter
from engine_mlx.models.gguf.drafter import write_drafter_gguf
from engine_mlx.models.gguf.export_drafter import export_drafter
from tests.conftest import require_asset
from tests.engine_mlx.models.gguf.synthetic import TRAINING_TEXT
from tests.support.tiny_models import build_tiny_model

REPO = Path(__file__).resolve().parents[4]
ENV = Path(os.environ.get("FLASHCHAT_LLAMA_CONVERTER", REPO / ".bench-envs/llama-converter"))
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def converter() -> list[str]:
    """The command that runs llama.cpp's converter."""
    unavailable = ENV / ".unavailable"
    if unavailable.is_file():
        pytest.skip(unavailable.read_text().strip())
    what = "llama.cpp's converter (scripts/setup_llama_converter.sh; `make test` runs it)"
    require_asset(ENV / ".flashchat-setup", what)
    return [str(ENV / "bin/python"), str(ENV / "src/convert_hf_to_gguf.py")]


def _convert(converter: list[str], model: Path, out: Path, qtype: str, *extra: str) -> Path:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    args = [*converter, str(model), "--outfile", str(out), "--outtype", qtype, *extra]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, f"convert_hf_to_gguf.py failed:\n{done.stderr[-4000:]}"
    return out


@pytest.fixture(scope="module")
def setup(converter, tmp_path_factory) -> dict[str, Any]:
    """The original drafter, its Hugging Face export, the target folder and its GGUF."""
    import sentencepiece as spm

    folder = tmp_path_factory.mktemp("llama_converter")
    target = build_tiny_model("qwen3", folder / "target")
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_TEXT.splitlines() * 8), model_writer=proto, vocab_size=96,
        model_type="bpe", character_coverage=1.0, hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    (target / "tokenizer.model").write_bytes(proto.getvalue())
    target_gguf = _convert(converter, target, folder / "target.gguf", "f32")
    vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    cfg = DFlashConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=96, vocab_size=vocab, num_target_layers=3,
        target_layer_ids=(0, 1), block_size=6, mask_token_id=5, rms_norm_eps=1e-5,
        rope_theta=10000.0, max_position_embeddings=512, conv_kernel_size=3,
        conv_group_size=16, selector_rank=8, selector_top_k=4,
    )  # fmt: skip
    mx.random.seed(3)
    model = DFlashModel(cfg)
    weights = []
    for name, value in tree_flatten(model.parameters()):  # norms near 1, the rest around 0
        noise = mx.random.normal(value.shape)
        weights.append((name, 1.0 + 0.1 * noise if name.endswith("norm.weight") else 0.3 * noise))
    model.load_weights(weights)
    mx.eval(model.parameters())
    original = save_dflash(model, folder / "drafter")
    return {
        "model": load_drafter(original),
        "hf": export_drafter(original, folder / "hf", form="hf"),
        "target": target,
        "target_gguf": target_gguf,
        "folder": folder,
    }


def _converted(converter, setup, qtype: str) -> tuple[Path, Path]:
    """(llama.cpp's GGUF, FlashChat's GGUF) of the drafter in ``qtype``."""
    folder, target = setup["folder"], str(setup["target"])
    theirs = _convert(converter, setup["hf"], folder / f"llama-{qtype}.gguf", qtype,
                      "--target-model-dir", target)  # fmt: skip
    ours = write_drafter_gguf(setup["model"], folder / f"ours-{qtype}.gguf",
                              setup["target_gguf"], qtype)  # fmt: skip
    return theirs, ours


def _read(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata: key -> (value types, value), tensors: name -> (shape, type, raw bytes))."""
    reader = GGUFReader(str(path))
    meta = {k: (list(f.types), f.contents()) for k, f in reader.fields.items()
            if not k.startswith("GGUF.")}  # fmt: skip
    tensors = {t.name: (tuple(int(n) for n in t.shape), t.tensor_type.name, bytes(t.data))
               for t in reader.tensors}  # fmt: skip
    return meta, tensors


def _assert_same_file(theirs: Path, ours: Path) -> None:
    (meta_t, tensors_t), (meta_o, tensors_o) = _read(theirs), _read(ours)
    assert sorted(tensors_t) == sorted(tensors_o)
    for name, (shape, qtype, data) in tensors_t.items():
        assert (shape, qtype) == tensors_o[name][:2], name
        assert data == tensors_o[name][2], f"{name}: different bytes"
    # general.* is the file's name, size label and type: the converter's own bookkeeping
    keys = sorted(k for k in meta_t.keys() | meta_o.keys() if not k.startswith("general."))
    assert any(k.startswith("dflash.") for k in keys) and "tokenizer.ggml.tokens" in keys
    for key in keys:
        assert key in meta_t, f"only FlashChat writes {key}"
        assert key in meta_o, f"only llama.cpp's converter writes {key}"
        assert meta_t[key] == meta_o[key], key
    assert meta_t["general.architecture"] == meta_o["general.architecture"]


def test_a_converted_export_loads_back_with_identical_tensors(converter, setup):
    theirs, ours = _converted(converter, setup, "f32")
    model = setup["model"]
    again = load_drafter(theirs)
    original = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
    loaded = {k: np.array(v) for k, v in tree_flatten(again.parameters())}
    assert sorted(loaded) == sorted(original)
    assert any(".attention_conv.kernel_projection." in k for k in original)
    assert any(k.startswith("candidate_selector.") for k in original)
    for name, value in original.items():
        assert np.count_nonzero(value) == value.size, f"{name} has zeros"
        assert loaded[name].dtype == value.dtype == np.float32, name
        assert np.array_equal(loaded[name], value), name
    cfg, back = model.config, again.config
    for key in ("block_size", "mask_token_id", "target_layer_ids", "conv_kernel_size",
                "conv_group_size", "selector_rank", "selector_top_k", "hidden_size",
                "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                "intermediate_size", "vocab_size", "rope_theta", "max_position_embeddings",
                "causal"):  # fmt: skip
        assert getattr(back, key) == getattr(cfg, key), key
    assert back.rms_norm_eps == float(np.float32(cfg.rms_norm_eps))  # GGUF keeps float32
    mine = load_drafter(ours).config  # and FlashChat's own file reads back the same
    assert back == mine
    _assert_same_file(theirs, ours)


@pytest.mark.parametrize("qtype", ["f16", "q8_0"])
def test_converter_and_flashchat_quantize_the_same_tensors_the_same_way(converter, setup, qtype):
    _assert_same_file(*_converted(converter, setup, qtype))
