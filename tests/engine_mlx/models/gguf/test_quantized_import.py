"""The import's ``quantized`` form: a GGUF's Q4_0, Q4_1 and Q8_0 matrices kept as the file
holds them, in MLX's affine layout in groups of 32, and everything else float16."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
from gguf import GGMLQuantizationType as T

from engine_mlx.models.gguf import MARKER_NAME, import_gguf, is_imported
from tests.engine_mlx.models.gguf.synthetic import MLX_TYPES, read_json


def test_the_quantized_form_keeps_q4_and_q8_matrices_as_the_file_holds_them(
    tmp_path: Path, tiny_ggufs: dict[str, tuple[Path, dict]]
) -> None:
    from engine_mlx.models.gguf.architecture import decoder_spec, tensor_plan
    from engine_mlx.models.gguf.reader import read_gguf
    from engine_mlx.models.target import TargetModel

    path, expected = tiny_ggufs["mlx"]
    out = import_gguf(path, tmp_path / "q", dtype="quantized")
    bits_of = {T.Q4_0: 4, T.Q4_1: 4, T.Q8_0: 8}
    plan = {hf: gguf for gguf, hf, _shape, _heads in tensor_plan(decoder_spec(read_gguf(path)))}
    kept = {hf.removesuffix(".weight"): bits_of[MLX_TYPES[g]] for hf, g in plan.items()
            if MLX_TYPES[g] in bits_of}  # fmt: skip
    assert {4, 8} <= set(kept.values())  # both widths, permuted q/k rows among them

    quantization = read_json(out / "config.json")["quantization"]
    assert {p: quantization[p]["bits"] for p in kept} == kept
    assert all(quantization[p]["group_size"] == 32 for p in kept)
    arrays = mx.load(str(out / "model.safetensors"))
    for name, want in expected.items():
        module = name.removesuffix(".weight")
        if module in kept:  # the file's own bits: dequantized, exactly llama.cpp's floats
            scales, biases = (
                arrays[f"{module}.{p}"].astype(mx.float32) for p in ("scales", "biases")
            )
            got = mx.dequantize(arrays[name], scales, biases, group_size=32, bits=kept[module])
        else:  # everything else is float16, as in the float16 form
            assert arrays[name].dtype == mx.float16, name
            got, want = arrays[name], mx.array(want).astype(mx.float16)
        assert np.array_equal(
            np.array(got.astype(mx.float32)), np.array(mx.array(want).astype(mx.float32))
        ), name

    assert read_json(out / MARKER_NAME)["dtype"] == "quantized"
    assert is_imported(out, path, "quantized") and not is_imported(out, path, "float16")
    target = TargetModel.load(out)
    assert target.quantized_layers == len(kept)


def test_the_quantized_form_of_a_file_without_such_matrices_is_float16(
    tmp_path: Path, tiny_ggufs: dict[str, tuple[Path, dict]]
) -> None:
    path, _expected = tiny_ggufs["numpy"]  # K-quants and BF16: mx.load cannot read it whole
    out = import_gguf(path, tmp_path / "q", dtype="quantized")
    assert "quantization" not in read_json(out / "config.json")
    assert {str(a.dtype) for a in mx.load(str(out / "model.safetensors")).values()} == {
        "mlx.core.float16"
    }
