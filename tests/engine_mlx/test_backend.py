"""Backend selection: a BLAS loaded before MLX on Linux, fp32 compute on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys

import mlx.core as mx
import pytest

from engine_mlx.backend import backend_info, compute_dtype, live_device
from engine_mlx.blas import status


def test_cpu_backend_computes_in_fp32():
    assert live_device() == "cpu"
    assert compute_dtype() == mx.float32
    assert compute_dtype(weight_bytes_fp32=1 << 50) is None  # too big: keep the checkpoint's


def _describe(env: dict[str, str], before: str = "") -> str:
    code = before + "import engine_mlx.backend as b; print(b.backend_info().blas)"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the BLAS preload is Linux-only")
def test_a_blas_is_loaded_and_switchable():
    assert status().loaded, status()
    assert backend_info().blas == status().describe()
    assert _describe({"FLASHCHAT_BLAS": "bundled"}).startswith("MLX's bundled BLAS")
    assert "too late" in _describe({}, before="import mlx.core; ")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the BLAS preload is Linux-only")
def test_a_forced_blas_that_is_not_installed_falls_back_with_the_reason():
    line = _describe({"FLASHCHAT_BLAS": "nosuchblas"})
    assert "FLASHCHAT_BLAS=nosuchblas is not installed" in line
    assert not line.startswith("MLX's bundled BLAS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the BLAS preload is Linux-only")
def test_without_a_compiler_the_small_batch_product_is_off_and_products_still_right(tmp_path):
    env = {"CC": str(tmp_path / "no-such-cc"), "FLASHCHAT_KERNEL_CACHE": str(tmp_path / "k")}
    code = (
        "import engine_mlx.blas as b, mlx.core as mx; "
        "print(b.status().small_gemm); "
        "print((mx.ones((4, 40)) @ mx.ones((7, 40)).T).sum().item())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    reason, total = proc.stdout.split("\n")[:2]
    assert reason.startswith("off: the C compiler") and "no-such-cc" in reason
    assert float(total) == 4 * 7 * 40
