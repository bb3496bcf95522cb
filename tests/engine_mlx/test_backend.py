"""Backend selection: OpenBLAS loaded before MLX on Linux, fp32 compute on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys

import mlx.core as mx
import pytest

from engine_mlx.backend import backend_info, compute_dtype, live_device


def test_cpu_backend_computes_in_fp32():
    assert live_device() == "cpu"
    assert compute_dtype() == mx.float32
    assert compute_dtype(weight_bytes_fp32=1 << 50) is None  # too big: keep the checkpoint's


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenBLAS preload is Linux-only")
def test_openblas_loaded_and_switchable():
    assert backend_info().openblas.startswith("loaded"), backend_info().openblas
    code = "import engine_mlx.backend as b; print(b.backend_info().openblas)"
    off = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "FLASHCHAT_NO_OPENBLAS": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert off.stdout.strip() == "disabled by FLASHCHAT_NO_OPENBLAS"
    late = subprocess.run(
        [sys.executable, "-c", "import mlx.core; " + code],
        capture_output=True,
        text=True,
        check=True,
    )
    assert late.stdout.strip().startswith("too late")
