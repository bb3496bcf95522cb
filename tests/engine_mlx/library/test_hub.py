"""Inspecting a repository before any download: runnable or not, what to fetch, how big."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_mlx.library.hub import (
    HubError,
    InsufficientResourcesError,
    UnsupportedRepoError,
    inspect_repo,
)
from engine_mlx.library.sources import HubSource
from tests.support.hub_server import HubRepo, HubServer


def _inspect(hub: HubServer, repo_id: str, revision: str | None = None, **kw):
    return inspect_repo(HubSource(repo_id, revision), endpoint=hub.endpoint, token=False, **kw)


def test_target_plan_selects_what_the_engine_reads(hub, publish, tiny_model_dir) -> None:
    repo = publish(
        "org/tiny",
        extra={"README.md": b"# Tiny", "pytorch_model.bin": b"\0" * 64, "img/logo.png": b"png"},
    )
    plan = _inspect(hub, "org/tiny")
    assert plan.kind == "target" and plan.commit == repo.commit
    names = [f.path for f in plan.files]
    assert names == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    folder = tiny_model_dir("qwen3")
    assert plan.download_bytes == sum((folder / n).stat().st_size for n in names)
    weights = next(f for f in plan.files if f.path == "model.safetensors")
    config = next(f for f in plan.files if f.path == "config.json")
    assert weights.sha256 and not weights.git_oid  # LFS: sha256 of the content
    assert config.git_oid and not config.sha256  # small file: git blob id
    assert plan.architecture == "qwen3" and plan.max_context == 512
    assert plan.memory_bytes > plan.weight_bytes == weights.size
    assert "org/tiny (model, qwen3)" in plan.summary()
    # Only the listing, the config read and nothing else: no file was downloaded.
    assert hub.file_requests("model.safetensors") == []


def test_revision_is_pinned_to_a_commit(hub, publish) -> None:
    repo = publish("org/tiny")
    repo.branches["dev"] = repo.commit
    assert _inspect(hub, "org/tiny", "dev").commit == repo.commit
    with pytest.raises(HubError, match="no branch, tag or commit 'nope'"):
        _inspect(hub, "org/tiny", "nope")


def test_missing_repo_is_named(hub) -> None:
    with pytest.raises(HubError, match=r"No model org/missing on 127\.0\.0\.1"):
        _inspect(hub, "org/missing")


def test_unreachable_hub_says_so() -> None:
    server = HubServer().start()
    endpoint = server.endpoint
    server.stop()
    with pytest.raises(HubError, match=r"Cannot reach 127\.0\.0\.1"):
        inspect_repo(HubSource("org/tiny"), endpoint=endpoint, token=False)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drop": ("tokenizer.json",)}, "has no tokenizer"),
        (
            {"drop": ("model.safetensors",), "extra": {"pytorch_model.bin": b"x"}},
            "PyTorch .bin weights only",
        ),
        (
            {"drop": ("model.safetensors", "config.json"), "extra": {"m.Q4_K_M.gguf": b"GGUF"}},
            "holds GGUF files",
        ),
    ],
)
def test_unrunnable_repos_are_refused_before_download(hub, publish, change, message) -> None:
    publish("org/bad", **change)
    with pytest.raises(UnsupportedRepoError, match=message):
        _inspect(hub, "org/bad")


def test_unknown_architecture_is_refused(hub, tiny_model_dir) -> None:
    folder = tiny_model_dir("qwen3")
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    config = json.loads(files["config.json"])
    files["config.json"] = json.dumps({**config, "model_type": "mamba9000"}).encode()
    hub.add(HubRepo("org/odd", files))
    with pytest.raises(UnsupportedRepoError, match="unknown architecture 'mamba9000'"):
        _inspect(hub, "org/odd")


def test_memory_too_small_is_refused_with_numbers(hub, publish, monkeypatch) -> None:
    publish("org/tiny")
    with pytest.raises(InsufficientResourcesError, match=r"needs about .* this machine has 1.0 kB"):
        _inspect(hub, "org/tiny", memory_limit=1000)
    # A Mac's limit is what its GPU may hold of the unified memory, and it says so.
    from engine_mlx.library import hub as hub_module

    monkeypatch.setattr(hub_module, "unified_memory", lambda: True)
    monkeypatch.setattr(hub_module, "usable_memory", lambda: 2000)
    with pytest.raises(InsufficientResourcesError, match=r"the GPU of this Mac can use 2.0 kB"):
        _inspect(hub, "org/tiny")


def test_drafter_and_mtp_repos(hub, tiny_target, tmp_path: Path) -> None:
    from engine_mlx.models.dflash import save_dflash
    from engine_mlx.models.mtp import save_mtp
    from tests.support.drafters import random_dflash, random_mtp_head

    target = tiny_target("qwen3")
    drafter = save_dflash(random_dflash(target), tmp_path / "drafter")
    hub.add(HubRepo("org/tiny-dflash", {p.name: p.read_bytes() for p in drafter.iterdir()}))
    plan = _inspect(hub, "org/tiny-dflash")
    assert plan.kind == "drafter" and [f.path for f in plan.files] == [
        "config.json",
        "model.safetensors",
    ]
    head = save_mtp(random_mtp_head(target), tmp_path / "head.safetensors")
    hub.add(HubRepo("org/tiny-mtp", {"head.safetensors": head.read_bytes(), "README.md": b"x"}))
    plan = _inspect(hub, "org/tiny-mtp")
    assert plan.kind == "mtp" and [f.path for f in plan.files] == ["head.safetensors"]
    # A safetensors file that is not an MTP head, without a config, is refused.
    weights = (tiny_target("qwen3").spec.path / "model.safetensors").read_bytes()
    hub.add(HubRepo("org/loose", {"model.safetensors": weights}))
    with pytest.raises(UnsupportedRepoError, match="not an MTP head"):
        _inspect(hub, "org/loose")
