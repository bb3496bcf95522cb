"""``FLASHCHAT_PATH=gpu``: on the CPU, the engine takes every decision a Mac's GPU takes, so
the code a Mac runs is tested here. Each decision is shown to change with the switch; the
lossless suites run in this configuration in ``make test`` (``Makefile``)."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest

from engine_mlx import backend, compute_path
from engine_mlx.api import encode_prompt
from engine_mlx.cli import main
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.sampling import Sampler, SamplingParams
from engine_mlx.models import attention
from engine_mlx.models.quantize import quantize_folder
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session
from tests.support.tiny_models import build_tiny_model


def _quantized_linears(target: TargetModel) -> list[type]:
    return [type(m) for _, m in target.model.named_modules() if "Quantized" in type(m).__name__]


@pytest.mark.parametrize("path", ["cpu", "gpu"])
def test_the_switch_changes_every_decision(path, tmp_path, monkeypatch):
    monkeypatch.setenv(compute_path.PATH_SWITCH, path)
    monkeypatch.delenv(backend.KERNEL_SWITCH, raising=False)
    half = build_tiny_model("qwen2", tmp_path / "half", dtype="float16")
    quantized = quantize_folder(half, tmp_path / "q4", bits=4)
    gpu = path == "gpu"
    assert compute_path.cpu_path() is not gpu
    # dtype: the checkpoint's half precision, as on a Mac; else float32 for the CPU's BLAS
    target = TargetModel.load(half)
    assert target.dtype == (mx.float16 if gpu else mx.float32)
    assert (target.half_layers == 0) is gpu  # the CPU path's product over float16 weights
    # the quantized product: MLX's own quantized_matmul, or the CPU's C product
    q_target = TargetModel.load(quantized)
    assert (q_target.quantized_layers == 0) is gpu
    kinds = set(_quantized_linears(q_target))
    assert (kinds == {nn.QuantizedLinear, nn.QuantizedEmbedding}) is gpu, kinds
    assert q_target.exact_attention is not gpu  # the CPU's row-by-row attention and layers
    # numpy attention, the C sampler and the kernels' executor
    assert attention.numpy_path_available() is not gpu
    assert (Sampler(SamplingParams(temperature=0.7, top_k=20))._host() is None) is gpu
    assert backend.kernel_path() == ("emulated" if gpu else "reference")
    info = backend.backend_info()
    assert info.path == ("GPU path on the CPU" if gpu else "CPU path")
    assert ("GPU path on the CPU" in info.summary()) is gpu
    # and the tokens: plain decoding of the half-precision model on either path
    ids = encode_prompt(target, "Hello world")
    result = list(Session(target).generate(ids, GenerationConfig(max_tokens=8)))[-1]
    assert len(result.tokens) == 8


def test_a_bad_path_is_refused_with_the_values_it_takes(monkeypatch, capsys):
    monkeypatch.setenv(compute_path.PATH_SWITCH, "metal")
    assert main(["info"]) == 2
    err = capsys.readouterr().err
    assert "FLASHCHAT_PATH='metal'" in err and "gpu, cpu or auto" in err


def test_info_names_the_path_it_is_told(monkeypatch, capsys):
    monkeypatch.setenv(compute_path.PATH_SWITCH, "auto")  # undone after: --path sets it
    assert main(["info", "--path", "gpu"]) == 0
    out = capsys.readouterr().out
    assert "(GPU path on the CPU)" in out and "compute checkpoint" in out
    assert "kernels in the CPU emulator" in out


@pytest.mark.slow  # ~2 min: the real demo, 16 tokens a mode, through MLX's quantized product
def test_the_4_bit_demo_on_the_gpu_path_drafts_losslessly(qwen_4bit_dir, monkeypatch):
    """A few dozen tokens of the real demo through a Mac's code (MLX's quantized product and
    layers, MLX's sampler; the kernels' reference ops: the emulator runs the kernels on the
    tiny models): every speculative mode gives the plain-greedy tokens and keeps drafted
    ones. In float32: MLX's CPU multiplies float16 activations without any fast path (over
    ten minutes for 32 tokens); the tiny models carry half precision through the suites. Even
    so this path decodes ~2 s a token here, hence 16 tokens and three modes."""
    from engine_mlx.api import load_speculators

    monkeypatch.setenv(compute_path.PATH_SWITCH, "gpu")
    monkeypatch.setenv(backend.KERNEL_SWITCH, "0")
    monkeypatch.setenv("FLASHCHAT_DTYPE", "float32")
    target = TargetModel.load(qwen_4bit_dir)
    assert target.quantized_layers == 0 and not target.exact_attention
    assert {type(m) for _, m in target.model.named_modules() if "Quantized" in type(m).__name__}
    assert not any("Cpu" in type(m).__name__ for _, m in target.model.named_modules())
    spec = load_speculators(target)
    session = Session(target, spec.drafter, spec.mtp, reuse_prompt=True)
    ids = encode_prompt(target, "Write a Python function that reverses a string.")

    def run(mode: str, width: int = 1):
        config = GenerationConfig(max_tokens=16, ignore_eos=True, mode=mode, width=width)
        return list(session.generate(ids, config))[-1]

    plain = run("ar")
    drafted = {mode: run(mode) for mode in ("dflash2", "mtp")}
    for mode, result in drafted.items():
        assert result.tokens == plain.tokens, mode
    assert drafted["dflash2"].stats.tau > 1.0
