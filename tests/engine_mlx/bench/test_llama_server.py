"""The suite's llama.cpp cells: llama-server's plain decoding and its DFlash2 with our drafter
exported, timed from the server's own timings, tau derived from its draft counts; a drafter
llama.cpp cannot run is named with the reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine_mlx.bench.llama_server import llama_cells
from engine_mlx.models.dflash import save_dflash
from engine_mlx.training.dflash import DrafterTrainConfig, new_drafter
from tests.engine_mlx.models.gguf.conftest import tiny_vocab  # noqa: F401 (fixture)
from tests.engine_mlx.models.gguf.test_llama_cpp_parity import BLOCK, SERVER, pair  # noqa: F401

pytestmark = pytest.mark.slow
TOKENS = 24


@pytest.fixture(scope="module")
def envs() -> Path:
    from tests.conftest import require_asset

    require_asset(SERVER, "llama-server (scripts/build_llama_cpp.sh; `make test` runs it)")
    return SERVER.parents[2]


def test_both_cells_run_our_drafter_and_read_tau_from_the_servers_counts(
    envs,
    pair,  # noqa: F811 (the fixture)
    tmp_path,
):
    target_gguf, _, target, drafter = pair
    folder = save_dflash(drafter, tmp_path / "drafter")
    runners, reasons = llama_cells(envs, target_gguf, folder, BLOCK, 512, tmp_path)
    assert not reasons and set(runners) == {"llama.cpp server", "llama.cpp dflash2"}
    prompt = target.tokenizer.encode("The quick brown fox jumps over the lazy dog. Hello world")
    plain = runners["llama.cpp server"](prompt, TOKENS)
    speculative = runners["llama.cpp dflash2"](prompt, TOKENS)
    assert speculative["output"] == plain["output"] and len(plain["output"]) == TOKENS
    assert plain["decode_tps"] > 0 and np.isnan(plain["tau"])
    assert 0 <= speculative["acceptance"] <= 1
    assert 1 <= speculative["tau"] <= BLOCK
    again = runners["llama.cpp dflash2"](prompt, TOKENS)  # the kept prompt: same draft
    assert again["tau"] == speculative["tau"] and again["output"] == plain["output"]


def test_a_drafter_llama_cpp_cannot_run_is_named_with_the_reason(
    envs,
    pair,  # noqa: F811 (the fixture)
    tmp_path,
):
    target_gguf, _, target, _ = pair
    present = new_drafter(target, DrafterTrainConfig(layers=1, block=BLOCK, conv=3), (0,))
    folder = save_dflash(present, tmp_path / "present")
    runners, reasons = llama_cells(envs, target_gguf, folder, BLOCK, 512, tmp_path)
    assert set(runners) == {"llama.cpp server"}
    assert "first DFlash2 variant" in reasons["llama.cpp dflash2"]
    runners, reasons = llama_cells(envs, None, folder, BLOCK, 512, tmp_path)
    assert not runners and "no GGUF" in reasons["llama.cpp server"]
