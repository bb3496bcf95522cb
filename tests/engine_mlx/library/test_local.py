"""Installing from this machine: folders, GGUF files and MTP files, checked then copied."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from engine_mlx.errors import EngineError, ModelLoadError
from engine_mlx.library.catalog import list_installed
from engine_mlx.library.install import add
from engine_mlx.library.manifest import read_manifest
from engine_mlx.library.progress import OperationCancelled
from engine_mlx.library.sources import GGUFSource, LocalFolder, SafetensorsFiles, SourceError


def test_folder_is_checked_copied_and_listed(library: Path, tiny_model_dir, tmp_path) -> None:
    src = shutil.copytree(tiny_model_dir("qwen3"), tmp_path / "My-Model")
    (src / "notes.txt").write_text("not copied")
    events = []
    path = add(LocalFolder(src), library, progress=events.append)
    assert path == library / "My-Model"
    assert (path / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    assert not (path / "notes.txt").exists() and (src / "notes.txt").exists()
    manifest = read_manifest(path)
    assert manifest["source"] == "local" and manifest["kind"] == "target"
    assert events[-1].phase == "installed" and events[-1].done == events[-1].total
    with pytest.raises(EngineError, match="already has a model named My-Model"):
        add(LocalFolder(src), library)


def test_bad_folder_is_refused_and_nothing_is_left(library: Path, tiny_model_dir, tmp_path):
    src = shutil.copytree(tiny_model_dir("qwen3"), tmp_path / "NoTokenizer")
    (src / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match="no tokenizer"):
        add(LocalFolder(src), library)
    assert list_installed(library) == []
    assert not (library / ".partial").exists()  # refused before anything was written


def test_cancelled_copy_leaves_nothing(library: Path, tiny_model_dir, tmp_path) -> None:
    src = shutil.copytree(tiny_model_dir("qwen3"), tmp_path / "Big")
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(OperationCancelled):
        add(LocalFolder(src), library, cancel=cancel)
    assert list_installed(library) == [] and not (library / "Big").exists()
    assert list((library / ".partial").iterdir()) == []


def test_drafter_and_mtp_files(library: Path, companions) -> None:
    drafter = add(LocalFolder(companions["drafter"]), library)
    head = add(SafetensorsFiles((companions["mtp"],)), library)
    kinds = {m.name: m.kind for m in list_installed(library)}
    assert kinds == {drafter.name: "drafter", head.name: "mtp"}
    assert head.name == "tiny-mtp"


def test_a_llama_cpp_dflash2_drafter_folder_is_a_drafter(library: Path, tiny_target, tmp_path):
    from engine_mlx.models.dflash import save_dflash
    from tests.support.drafters import random_dflash

    folder = save_dflash(random_dflash(tiny_target("qwen3"), reference=True), tmp_path / "d2")
    installed = add(LocalFolder(folder), library)
    assert [m.kind for m in list_installed(library) if m.name == installed.name] == ["drafter"]


def test_model_weights_are_not_an_mtp_head(library: Path, tiny_model_dir) -> None:
    with pytest.raises(SourceError, match="not an MTP head"):
        add(SafetensorsFiles((tiny_model_dir("qwen3") / "model.safetensors",)), library)


def test_gguf_is_imported_into_the_library(library: Path, tiny_gguf: Path) -> None:
    events = []
    path = add(GGUFSource(tiny_gguf), library, progress=events.append)
    assert path == library / "Tiny-Llama.Q8_0"
    (model,) = list_installed(library)
    assert model.kind == "target" and model.architecture == "llama" and not model.problem
    assert model.source == "imported from Tiny-Llama.Q8_0.gguf"
    assert events[-1].phase == "installed" and events[-1].done == events[-1].total > 0


def _drafter_gguf(tiny_target, folder: Path) -> Path:
    """A DFlash2 drafter for the tiny qwen3 target, as llama.cpp's GGUF."""
    from engine_mlx.models.gguf.drafter import write_drafter_gguf
    from tests.support.drafters import random_dflash, write_tokenizer_gguf

    target = tiny_target("qwen3")
    tokenizer = write_tokenizer_gguf(target, folder / "tokenizer.gguf")
    model = random_dflash(target, reference=True)
    return write_drafter_gguf(model, folder / "Tiny-DFlash2.gguf", tokenizer, "f32")


def test_a_dropped_drafter_gguf_is_paired_with_the_model_it_fits(
    library: Path, tiny_target, tiny_model_dir, tmp_path
) -> None:
    from engine_mlx.library.catalog import pairings
    from engine_mlx.models.drafters import load_drafter

    add(LocalFolder(shutil.copytree(tiny_model_dir("qwen3"), tmp_path / "Tiny-Qwen3")), library)
    path = add(GGUFSource(_drafter_gguf(tiny_target, tmp_path)), library)
    installed = list_installed(library)
    drafter = next(m for m in installed if m.name == path.name)
    assert drafter.kind == "drafter" and drafter.architecture.startswith("DFlash2")
    assert drafter.source == "imported from Tiny-DFlash2.gguf"
    fits = [(p.target, p.fits) for p in pairings(installed) if p.companion == path.name]
    assert fits == [("Tiny-Qwen3", True)]
    assert load_drafter(path).config.reference_dflash2  # the selector came along


def test_a_dropped_drafter_gguf_without_its_model_is_refused_with_the_reason(
    library: Path, tiny_target, tiny_gguf, tmp_path
) -> None:
    gguf = _drafter_gguf(tiny_target, tmp_path)
    with pytest.raises(SourceError, match="no model for it to draft for"):
        add(GGUFSource(gguf), library)
    add(GGUFSource(tiny_gguf), library)  # a llama of another vocabulary
    with pytest.raises(SourceError, match=r"no model of the library fits it \(Tiny-Llama"):
        add(GGUFSource(gguf), library)
    assert [m.kind for m in list_installed(library)] == ["target"]
    assert list((library / ".partial").iterdir()) == []
