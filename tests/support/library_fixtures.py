"""Fixtures for the model library's tests (engine and app): a local hub serving tiny
generated models, companions for a tiny target (drafters, an MTP head) and a tiny GGUF.

Conftests import them (``from tests.support.library_fixtures import *``-style, by name)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

# The GGUF tests' trained vocabulary and weights, shared rather than rebuilt differently.
from tests.engine_mlx.models.gguf.conftest import hf_weights, tiny_vocab
from tests.support.hub_server import HubRepo, HubServer, repo_from_folder

__all__ = ["companions", "hf_weights", "hub", "publish", "tiny_gguf", "tiny_vocab"]


@pytest.fixture
def hub() -> Iterator[HubServer]:
    with HubServer() as server:
        yield server


@pytest.fixture
def publish(hub: HubServer, tiny_model_dir: Callable[[str], Path]) -> Callable[..., HubRepo]:
    """``publish(repo_id, arch="qwen3", extra={...}, drop=(...), folder=None)``: serve a tiny
    model folder (plus extra files, minus dropped ones) as a hub repository."""

    def make(
        repo_id: str,
        arch: str = "qwen3",
        extra: dict[str, bytes] | None = None,
        drop: tuple[str, ...] = (),
        folder: Path | None = None,
    ) -> HubRepo:
        repo = repo_from_folder(repo_id, folder or tiny_model_dir(arch), extra)
        for name in drop:
            repo.files.pop(name)
        return hub.add(HubRepo(repo_id, repo.files))

    return make


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory, tiny_vocab, hf_weights) -> Path:
    """A small llama GGUF with quantized tensors, as llama.cpp writes them."""
    from tests.engine_mlx.models.gguf.synthetic import VARIANTS, encode_tensors, write_gguf

    payloads, _ = encode_tensors(hf_weights, VARIANTS["mlx"])
    folder = tmp_path_factory.mktemp("gguf")
    return write_gguf(folder / "Tiny-Llama.Q8_0.gguf", tiny_vocab, payloads)


@pytest.fixture(scope="session")
def companions(tiny_target, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A fitting DFlash drafter, a drafter with another vocabulary, and an MTP head file,
    all made for the tiny qwen3 target."""
    from engine_mlx.models.dflash import DFlashModel, save_dflash
    from engine_mlx.models.mtp import save_mtp
    from tests.support.drafters import random_dflash, random_mtp_head

    target = tiny_target("qwen3")
    root = tmp_path_factory.mktemp("companions")
    good = random_dflash(target)
    other = DFlashModel(replace(good.config, vocab_size=1000))
    return {
        "drafter": save_dflash(good, root / "tiny-dflash"),
        "other_vocab": save_dflash(other, root / "big-vocab-dflash"),
        "mtp": save_mtp(random_mtp_head(target), root / "heads" / "tiny-mtp.safetensors"),
    }
