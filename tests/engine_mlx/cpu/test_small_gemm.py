"""The small-batch product: equal to x @ W.T, the same bits for a row whatever the batch, and
the same greedy tokens as the BLAS alone."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.blas import blas_only, small_gemm, status
from engine_mlx.cpu.small_gemm import SmallGemm, library_path

pytestmark = pytest.mark.skipif(
    small_gemm() is None, reason=f"small-batch product not loaded: {status().small_gemm}"
)


def _reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) @ w.astype(np.float64).T


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33])
@pytest.mark.parametrize(("inputs", "outputs"), [(1, 1), (5, 3), (17, 13), (100, 70), (64, 9)])
def test_mlx_products_equal_the_reference(rows, inputs, outputs):
    rng = np.random.default_rng(rows * 1000 + inputs + outputs)
    x = rng.standard_normal((rows, inputs), dtype=np.float32)
    w = rng.standard_normal((outputs, inputs), dtype=np.float32)
    before = small_gemm().calls()
    got = np.array(mx.array(x) @ mx.array(w).T)
    after = small_gemm().calls()
    np.testing.assert_allclose(got, _reference(x, w), rtol=2e-5, atol=2e-5 * np.sqrt(inputs))
    taken, handed_on = after[0] - before[0], after[1] - before[1]
    # Products over more rows than it takes (33) go to the BLAS; MLX may answer a 1x1 itself.
    if rows <= 32 and inputs * outputs > 1:
        assert taken == 1, (taken, handed_on)
    elif rows > 32:
        assert taken == 0 and handed_on >= 1


def test_blas_only_hands_every_product_to_the_blas_for_a_while():
    x, w = mx.ones((4, 64)), mx.ones((10, 64))
    before = small_gemm().calls()
    with blas_only():
        mx.eval(x @ w.T)
    during = small_gemm().calls()
    mx.eval(x @ w.T)
    after = small_gemm().calls()
    assert during[0] == before[0] and during[1] == before[1] + 1
    assert after[0] == during[0] + 1


def test_threaded_product_matches_and_rows_do_not_depend_on_the_batch():
    """Large enough to be split across threads; each row's bits equal its one-row product,
    which is what lets plain decoding and verification agree exactly."""
    rng = np.random.default_rng(7)
    inputs, outputs = 896, 1000
    w = rng.standard_normal((outputs, inputs), dtype=np.float32)
    x = rng.standard_normal((32, inputs), dtype=np.float32)
    full = np.empty((32, outputs), np.float32)
    small_gemm().multiply(x.ctypes.data, w.ctypes.data, full.ctypes.data, 32, outputs, inputs)
    np.testing.assert_allclose(full, _reference(x, w), rtol=1e-4, atol=1e-4)
    for rows in (1, 2, 3, 5, 8, 13):
        part = np.empty((rows, outputs), np.float32)
        small_gemm().multiply(x.ctypes.data, w.ctypes.data, part.ctypes.data, rows, outputs, inputs)
        assert np.array_equal(part, full[:rows]), f"rows={rows} differ from the 32-row product"


def test_one_row_in_mlx_equals_its_row_in_a_verify_sized_product():
    rng = np.random.default_rng(3)
    w = mx.array(rng.standard_normal((300, 200), dtype=np.float32))
    x = mx.array(rng.standard_normal((8, 200), dtype=np.float32))
    block = np.array(x @ w.T)
    for i in range(8):
        assert np.array_equal(np.array(x[i : i + 1] @ w.T)[0], block[i])


def _greedy_tokens(
    model: str, env: dict[str, str], prompt: str = "The quick brown fox", tokens: int = 24
) -> tuple[list[int], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "engine_mlx", "generate", "--model", model, "--prompt",
         prompt, "--max-tokens", str(tokens), "--mode", "ar", "--json"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false", **env},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    return events[-1]["tokens"], events[0]["backend"]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "qwen3_5"])
def test_same_greedy_tokens_as_the_blas_alone(tiny_model_dir, arch):
    model = str(tiny_model_dir(arch))
    with_product, backend_on = _greedy_tokens(model, {})
    without, backend_off = _greedy_tokens(model, {"FLASHCHAT_SMALL_GEMM": "0"})
    assert "small-batch product 1–32 rows" in backend_on
    assert "small-batch product off: FLASHCHAT_SMALL_GEMM=0" in backend_off
    assert with_product == without and len(with_product) > 0


@pytest.mark.slow
def test_a_float_model_decodes_the_same_tokens_as_with_the_blas_alone(smollm2_float_dir):
    prompt = "Explain what a hash map is, in three sentences."
    with_product, _ = _greedy_tokens(str(smollm2_float_dir), {}, prompt, 64)
    without, _ = _greedy_tokens(str(smollm2_float_dir), {"FLASHCHAT_SMALL_GEMM": "0"}, prompt, 64)
    assert with_product == without and len(with_product) >= 32


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 code paths")
@pytest.mark.parametrize(("march", "lanes"), [("x86-64-v3", 8), ("x86-64", 4)])
def test_the_narrower_builds_compute_the_same_products(march, lanes):
    """AVX2 and SSE machines get other tiles and reductions: built here, checked here."""
    build = SmallGemm(library_path(march), global_symbols=False)
    assert build.vector_width() == lanes
    rng = np.random.default_rng(11)
    for rows, inputs, outputs in [(1, 37, 21), (2, 64, 9), (5, 100, 70), (32, 896, 600)]:
        x = rng.standard_normal((rows, inputs), dtype=np.float32)
        w = rng.standard_normal((outputs, inputs), dtype=np.float32)
        got = np.empty((rows, outputs), np.float32)
        build.multiply(x.ctypes.data, w.ctypes.data, got.ctypes.data, rows, outputs, inputs)
        np.testing.assert_allclose(got, _reference(x, w), rtol=1e-4, atol=1e-4)
        one = np.empty((1, outputs), np.float32)
        build.multiply(x.ctypes.data, w.ctypes.data, one.ctypes.data, 1, outputs, inputs)
        assert np.array_equal(one[0], got[0])
