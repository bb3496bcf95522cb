"""Kernel tests run on every executor: the CPU emulator always; MLX's CUDA backend and its
Metal backend where they are live (skipped elsewhere, with the reason). On a GPU machine,
``FLASHCHAT_REQUIRE_BACKEND=cuda`` (or ``metal``) turns that skip into a failure, so a check
that was meant to run on the GPU cannot pass by skipping it."""

from __future__ import annotations

import os

import pytest

from engine_mlx.backend import live_device
from engine_mlx.kernels import EmulatorExecutor, Executor, GpuExecutor

SKIP_REASONS = {
    "cuda": "MLX's CUDA backend is not live here (needs an NVIDIA GPU and mlx[cuda])",
    "metal": "MLX's Metal backend is not live here (needs macOS on Apple silicon)",
}


def _backend(name: str) -> object:
    live = live_device() == name
    required = os.environ.get("FLASHCHAT_REQUIRE_BACKEND") == name
    skip = pytest.mark.skipif(not live and not required, reason=SKIP_REASONS[name])
    return pytest.param(name, id=name, marks=skip)


@pytest.fixture(
    params=[pytest.param("emulator", id="emulator"), _backend("cuda"), _backend("metal")]
)
def executor(request: pytest.FixtureRequest) -> Executor:
    if request.param == "emulator":
        return EmulatorExecutor()
    if live_device() != request.param:
        pytest.fail(f"FLASHCHAT_REQUIRE_BACKEND={request.param}: {SKIP_REASONS[request.param]}")
    return GpuExecutor(request.param)
