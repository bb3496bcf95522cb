"""The installed models: kinds and details from configs, pairings with reasons, suggested
drafters for known Qwen shapes, removal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine_mlx.errors import EngineError
from engine_mlx.library.catalog import (
    list_installed,
    pairings,
    remove_model,
    suggestions,
)
from engine_mlx.library.manifest import write_manifest


@pytest.fixture
def filled(library: Path, tiny_model_dir, companions) -> Path:
    library.mkdir(parents=True)
    shutil.copytree(tiny_model_dir("qwen3"), library / "tiny-qwen3")
    shutil.copytree(tiny_model_dir("qwen2"), library / "tiny-qwen2")
    shutil.copytree(companions["drafter"], library / "tiny-dflash")
    shutil.copytree(companions["other_vocab"], library / "big-vocab-dflash")
    (library / "tiny-mtp").mkdir()
    shutil.copy(companions["mtp"], library / "tiny-mtp")
    (library / ".partial" / "org--x@123").mkdir(parents=True)  # in flight: not listed
    shutil.copy(tiny_model_dir("qwen3") / "config.json", library / ".partial" / "org--x@123")
    return library


def test_lists_kinds_and_details(filled: Path) -> None:
    models = {m.name: m for m in list_installed(filled)}
    assert sorted(models) == [
        "big-vocab-dflash",
        "tiny-dflash",
        "tiny-mtp",
        "tiny-qwen2",
        "tiny-qwen3",
    ]
    qwen3 = models["tiny-qwen3"]
    assert (qwen3.kind, qwen3.architecture, qwen3.quantization) == ("target", "qwen3", "fp32")
    assert qwen3.max_context == 512 and qwen3.problem == "" and not qwen3.builtin_mtp
    assert qwen3.size_bytes == sum(p.stat().st_size for p in (filled / "tiny-qwen3").iterdir())
    assert models["tiny-dflash"].kind == "drafter"
    assert models["tiny-dflash"].architecture.startswith("DFlash")
    assert models["tiny-mtp"].kind == "mtp" and models["tiny-mtp"].hidden_size == 64


def test_pairings_say_why_not(filled: Path) -> None:
    pairs = {(p.target, p.companion): p for p in pairings(list_installed(filled))}
    assert pairs["tiny-qwen3", "tiny-dflash"].fits
    bad = pairs["tiny-qwen3", "big-vocab-dflash"]
    assert not bad.fits and bad.reason == "drafter vocabulary 1000, target 320"
    # The tiny drafter reads target layers 0 and 1: qwen2's two layers have them too.
    assert pairs["tiny-qwen2", "tiny-dflash"].fits
    assert pairs["tiny-qwen3", "tiny-mtp"].fits and pairs["tiny-qwen3", "tiny-mtp"].kind == "mtp"


def test_pairing_matches_the_loader(filled: Path, tiny_target) -> None:
    """The library's "does not fit" is the loader's refusal, word for word."""
    from engine_mlx.api import load_drafter
    from engine_mlx.models.dflash import DrafterMismatchError

    with pytest.raises(DrafterMismatchError) as refused:
        load_drafter(filled / "big-vocab-dflash", tiny_target("qwen3"))
    reason = next(
        p.reason for p in pairings(list_installed(filled)) if p.companion == "big-vocab-dflash"
    )
    assert reason in str(refused.value)


def test_broken_model_is_listed_with_its_problem(filled: Path) -> None:
    weights = filled / "tiny-qwen2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    (broken,) = [m for m in list_installed(filled) if m.name == "tiny-qwen2"]
    assert "truncated" in broken.problem
    assert all(p.target != "tiny-qwen2" for p in pairings(list_installed(filled)))


def test_suggests_z_lab_drafters_for_known_qwen_shapes(library: Path, tiny_model_dir) -> None:
    """Shape decides (a Qwen3-4B conversion or fine-tune gets the 4B drafter); the config is
    rewritten to Qwen3-4B's sizes, which is all the catalog reads."""
    library.mkdir(parents=True)
    folder = shutil.copytree(tiny_model_dir("qwen3"), library / "Qwen3-4B-4bit")
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_size=2560, num_hidden_layers=36, vocab_size=151936)
    config["quantization"] = {"bits": 4, "group_size": 64}
    (folder / "config.json").write_text(json.dumps(config))
    models = list_installed(library)
    assert models[0].quantization == "4-bit, group 64"
    config["quantization"]["model.embed_tokens"] = {"bits": 8, "group_size": 64}  # a GGUF's head
    (folder / "config.json").write_text(json.dumps(config))
    assert list_installed(library)[0].quantization == "4/8-bit, group 64"
    config["quantization"].pop("model.embed_tokens")
    (folder / "config.json").write_text(json.dumps(config))
    (suggested,) = suggestions(models)
    assert suggested.repo_id == "z-lab/Qwen3-4B-DFlash-b16"
    assert suggested.target == "Qwen3-4B-4bit" and "Qwen3-4B" in suggested.reason
    # Once that drafter is installed (its manifest names the repo), nothing is suggested.
    drafter = library / "Qwen3-4B-DFlash-b16"
    drafter.mkdir()
    write_manifest(drafter, {"kind": "drafter", "source": "hub", "repo_id": suggested.repo_id})
    (drafter / "config.json").write_text("{}")
    assert suggestions(list_installed(library)) == []


def test_remove_model(filled: Path, tmp_path: Path) -> None:
    remove_model(filled / "tiny-qwen2", filled)
    assert not (filled / "tiny-qwen2").exists()
    assert "tiny-qwen2" not in [m.name for m in list_installed(filled)]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(EngineError, match="not a model in the library"):
        remove_model(elsewhere, filled)
    assert elsewhere.exists()
