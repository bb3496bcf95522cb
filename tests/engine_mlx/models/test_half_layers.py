"""A float16 checkpoint on the CPU: its linear layers and tied head become the engine's
product over the float16 weights, its layers run through the C decoder layer, its logits are
mlx-lm's within float32 rounding, and a verification's rows are the bits decoding computes."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.models.half_layers import CpuHalfEmbedding, CpuHalfLinear
from engine_mlx.models.quantized import CpuQuantizedMLP
from engine_mlx.models.target import TargetModel

ARCHS = ("llama", "qwen2", "qwen3")


def _as_float16(folder: Path, out: Path) -> Path:
    """A copy of the tiny model folder with its weights stored as float16."""
    out.mkdir(parents=True)
    for file in folder.iterdir():
        if file.suffix == ".safetensors":
            weights = mx.load(str(file))
            mx.save_safetensors(
                str(out / file.name), {k: v.astype(mx.float16) for k, v in weights.items()}
            )
        else:
            (out / file.name).write_bytes(file.read_bytes())
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "torch_dtype": "float16"}))
    return out


@pytest.fixture(scope="module")
def half_folder(tiny_model_dir, tmp_path_factory):
    made: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in made:
            made[arch] = _as_float16(tiny_model_dir(arch), tmp_path_factory.mktemp(arch) / "m")
        return made[arch]

    return get


@pytest.mark.parametrize("arch", ARCHS)
def test_a_float16_target_takes_the_engines_product_and_c_layers(arch, half_folder):
    target = TargetModel.load(half_folder(arch))
    assert target.quantized_layers == 0 and target.half_layers > 0
    assert target._numpy_layers is not None  # its decoding and verification rows: C layers
    for layer in target.layers:
        attn = layer.self_attn
        assert all(
            type(p) is CpuHalfLinear for p in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)
        )
        assert type(layer.mlp) is CpuQuantizedMLP and layer.mlp.numpy_ready()
    head = target.inner.embed_tokens if target._tied else target._head
    assert type(head) in (CpuHalfEmbedding, CpuHalfLinear)


def test_a_float32_target_keeps_mlxs_graph(tiny_target):
    target = tiny_target("llama")  # float32 weights: not float16 values
    assert target.half_layers == 0 and target._numpy_layers is None


@pytest.mark.parametrize("arch", ARCHS)
def test_its_logits_are_mlx_lms_and_verification_rows_are_decodings(arch, half_folder):
    import mlx_lm

    folder = half_folder(arch)
    target = TargetModel.load(folder)
    reference, _ = mlx_lm.load(str(folder))
    reference.set_dtype(mx.float32)
    prompt, tokens = list(range(3, 40)), [5, 9, 13, 21, 34]

    want = np.array(reference(mx.array([prompt + tokens]))[0, len(prompt) - 1 :])
    cache = target.make_cache()
    decoded = [np.array(target.forward(mx.array(prompt), cache).logits[0, -1])]
    for token in tokens:
        decoded.append(np.array(target.forward(mx.array([token]), cache).logits[0, -1]))
    np.testing.assert_allclose(np.stack(decoded), want, rtol=1e-4, atol=1e-4)

    cache = target.make_cache()
    target.forward(mx.array(prompt), cache)
    prefix, rows = len(prompt), len(tokens)
    tree = mx.array(np.tril(np.ones((rows, rows), bool)))
    mask = mx.concatenate([mx.ones((rows, prefix), dtype=mx.bool_), tree], axis=1)
    verified = target.forward(
        mx.array(tokens), cache, positions=mx.arange(prefix, prefix + rows), mask=mask, tree=tree
    ).logits[0]
    assert np.array_equal(np.array(verified), np.stack(decoded[1:]))
