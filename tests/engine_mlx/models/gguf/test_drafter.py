"""DFlash2 drafters in llama.cpp's GGUF: written with the names, shapes, types and keys of
llama.cpp's loader, read back to the same model, and bad files refused with a message."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter
from mlx.utils import tree_flatten

from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.errors import GGUFImportError
from engine_mlx.models.gguf.drafter import is_drafter_gguf, load_drafter_gguf, write_drafter_gguf
from engine_mlx.models.gguf.reader import read_gguf, read_tensor_numpy
from engine_mlx.session import Session
from tests.support.drafters import random_dflash, write_tokenizer_gguf

T = GGMLQuantizationType


@pytest.fixture
def tokenizer_gguf(tiny_target, tmp_path) -> Path:
    """The target's tokenizer in GGUF fields (what a target GGUF carries)."""
    return write_tokenizer_gguf(tiny_target("qwen3"), tmp_path / "target-tokenizer.gguf")


def _parameters(model) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in tree_flatten(model.parameters())}


@pytest.mark.parametrize(("qtype", "tolerance"), [("f32", 0.0), ("f16", 2e-3), ("q8_0", 2e-2)])
def test_a_drafter_round_trips_through_gguf(
    qtype, tolerance, tiny_target, tokenizer_gguf, tmp_path
):
    target = tiny_target("qwen3")
    model = random_dflash(target, reference=True)
    path = write_drafter_gguf(model, tmp_path / "d.gguf", tokenizer_gguf, qtype)
    assert is_drafter_gguf(path) and not is_drafter_gguf(tokenizer_gguf)
    again = load_drafter_gguf(path)
    for key in ("hidden_size", "num_hidden_layers", "target_layer_ids", "block_size",
                "mask_token_id", "conv_kernel_size", "conv_group_size", "selector_rank",
                "selector_top_k", "vocab_size", "head_dim"):  # fmt: skip
        assert getattr(again.config, key) == getattr(model.config, key), key
    ours, theirs = _parameters(model), _parameters(again)
    assert ours.keys() == theirs.keys()
    for name, value in ours.items():
        scale = max(1.0, float(np.abs(value).max()))
        np.testing.assert_allclose(theirs[name], value, atol=tolerance * scale, err_msg=name)


def test_names_shapes_types_and_keys_are_llama_cpps(tiny_target, tokenizer_gguf, tmp_path):
    target = tiny_target("qwen3")
    model = random_dflash(target, reference=True)
    g = read_gguf(write_drafter_gguf(model, tmp_path / "d.gguf", tokenizer_gguf, "q8_0"))
    h, cfg = model.config.hidden_size, model.config
    assert g.metadata["general.architecture"] == "dflash"
    assert g.metadata["dflash.target_layers"].tolist() == [i + 1 for i in cfg.target_layer_ids]
    assert g.metadata["dflash.selector_top_k"] == 4 and g.metadata["dflash.conv_group_size"] == 16
    assert g.metadata["tokenizer.ggml.mask_token_id"] == cfg.mask_token_id
    assert g.metadata["tokenizer.ggml.pre"] == "qwen2"  # the target's tokenizer, copied
    base = g.tensors["blk.0.attn_conv_base"]
    assert base.dims == (h, 3, 2) and base.qtype == T.F32  # ne order, always F32
    assert g.tensors["blk.1.ffn_conv_proj.weight"].dims == (h, 2 * 3 * (h // 16))
    assert g.tensors["selector_hidden.weight"].dims == (h, 8)
    assert g.tensors["selector_predecessor.weight"].dims == (8, cfg.vocab_size)
    assert g.tensors["enc.output_norm.weight"].qtype == T.F32
    assert g.tensors["blk.0.attn_q.weight"].qtype == T.Q8_0
    conv = read_tensor_numpy(g, base)
    assert np.array_equal(conv, np.array(model.layers[0].attention_conv.base_kernel))


def test_a_gguf_drafter_drafts_what_the_original_drafts(tiny_target, tokenizer_gguf, tmp_path):
    target = tiny_target("qwen3")
    model = random_dflash(target, reference=True)
    again = load_drafter_gguf(write_drafter_gguf(model, tmp_path / "d.gguf", tokenizer_gguf))
    ids = target.tokenizer.encode("The quick brown fox jumps over the lazy dog")
    config = GenerationConfig(max_tokens=20, mode="dflash2", width=1, lookup=False)
    runs = [list(Session(target, DFlashDrafter(m, target)).generate(ids, config))[-1]
            for m in (model, again)]  # fmt: skip
    plain = list(Session(target).generate(ids, GenerationConfig(max_tokens=20)))[-1]
    assert runs[0].tokens == runs[1].tokens == plain.tokens
    assert runs[0].stats.drafted == runs[1].stats.drafted > 0
    assert runs[0].stats.accepted == runs[1].stats.accepted


def _rewrite(src: Path, dst: Path, *, drop=(), add_tensors=(), meta=None) -> Path:
    """A copy of ``src`` with tensors dropped or added and metadata changed."""
    g = read_gguf(src)
    writer = GGUFWriter(str(dst), "dflash")
    for key, value in {**g.metadata, **(meta or {})}.items():
        if key.startswith("GGUF.") or key == "general.architecture" or value is None:
            continue
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, np.ndarray):
            writer.add_array(key, value.tolist())
        else:
            writer.add_array(key, value)
    for name, info in g.tensors.items():
        if name not in drop:
            writer.add_tensor(name, read_tensor_numpy(g, info))
    for name, value in add_tensors:
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(drop=("blk.1.ffn_conv_base",)), "missing tensor 'blk.1.ffn_conv_base'"),
        (dict(meta={"dflash.conv_group_size": 24}), "does not divide the hidden size"),
        (dict(meta={"dflash.selector_top_k": 9}), r"k\*\(k\+1\) = 90"),
        (
            dict(
                meta={
                    "dflash.selector_top_k": None,
                    "dflash.conv_kernel_size": None,
                    "dflash.conv_group_size": None,
                    "dflash.selector_rank": None,
                }
            ),
            "missing conv/selector metadata",
        ),
        (dict(meta={"dflash.conv_kernel_size": 5}), r"has shape \(2, 3, 64\)"),
        (
            dict(add_tensors=[("token_embd.weight", np.zeros((320, 64), np.float32))]),
            "its own token embedding",
        ),
        (dict(meta={"dflash.attention.sliding_window": 8}), "sliding-window attention"),
        (dict(meta={"dflash.target_layers": [0, 1]}), "layer ids from 1"),
        (dict(meta={"general.architecture": None}), "not a DFlash drafter"),
    ],
)
def test_bad_drafter_ggufs_are_refused_with_a_message(
    change, message, tiny_target, tokenizer_gguf, tmp_path
):
    model = random_dflash(tiny_target("qwen3"), reference=True)
    good = write_drafter_gguf(model, tmp_path / "good.gguf", tokenizer_gguf)
    if change.get("meta", {}).get("general.architecture", 1) is None:
        bad = tokenizer_gguf
    else:
        bad = _rewrite(good, tmp_path / "bad.gguf", **change)
    with pytest.raises(GGUFImportError, match=message):
        load_drafter_gguf(bad)


def test_the_export_drafter_command(tiny_target, tokenizer_gguf, tmp_path, capsys):
    from engine_mlx.cli import main
    from engine_mlx.models.dflash import load_dflash, save_dflash
    from engine_mlx.models.drafters import load_drafter

    target = tiny_target("qwen3")
    model = random_dflash(target, reference=True)
    folder = save_dflash(model, tmp_path / "drafter")
    out = tmp_path / "out"
    args = ["export-drafter", str(folder), "--out", str(out), "--type", "q8_0"]
    assert main([*args, "--target-gguf", str(tokenizer_gguf)]) == 0
    written = Path(capsys.readouterr().out.strip())
    assert written == out / "drafter-Q8_0.gguf"
    assert load_drafter(written).config.selector_top_k == 4  # a .gguf loads where folders do
    assert main(["export-drafter", str(folder), "--out", str(out), "--format", "hf"]) == 0
    assert load_dflash(Path(capsys.readouterr().out.strip())).config == model.config
    assert main(args) == 2  # no tokenizer to carry
    assert "--target-gguf" in capsys.readouterr().err
    first = save_dflash(random_dflash(target, conv=4), tmp_path / "first")
    assert main(["export-drafter", str(first), "--out", str(out), "--format", "hf"]) == 2
    assert "first DFlash2 variant" in capsys.readouterr().err


def test_generate_takes_a_drafter_gguf(
    tiny_target, tiny_model_dir, tokenizer_gguf, tmp_path, capsys
):
    import json

    from engine_mlx.cli import main

    gguf = write_drafter_gguf(
        random_dflash(tiny_target("qwen3"), reference=True), tmp_path / "d.gguf", tokenizer_gguf
    )
    outs = []
    for extra in ([], ["--drafter", str(gguf), "--mode", "dflash2"]):
        args = ["generate", "--model", str(tiny_model_dir("qwen3")), "--prompt", "Hi"]
        assert main([*args, "--max-tokens", "12", "--json", *extra]) == 0
        outs.append(json.loads(capsys.readouterr().out.splitlines()[-1]))
    assert outs[0]["tokens"] == outs[1]["tokens"]
    assert outs[1]["stats"]["drafted"] > 0
