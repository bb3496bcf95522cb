"""Installing what is already on this machine: a model folder, a GGUF file, MTP files.

The source is checked before anything is copied (the same checks as loading: config,
architecture, weights, tokenizer; a drafter's config; ``mtp.*`` tensors), then the files the
engine reads are copied into a staging folder under ``.partial/`` (hashed on the way, for
the manifest) and the folder is renamed into the library. A cancelled or failed copy is
deleted, not resumed: the source is still there, a copy is quick to redo. The user's own
files are never moved or changed.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
import uuid
from pathlib import Path

from engine_mlx.errors import EngineError
from engine_mlx.library.catalog import mtp_tensors
from engine_mlx.library.classify import classify_folder
from engine_mlx.library.download import replace_folder
from engine_mlx.library.manifest import partial_root, write_manifest
from engine_mlx.library.progress import ProgressCallback, ProgressReporter, check_cancel
from engine_mlx.library.sources import SourceError
from engine_mlx.paths import models_dir

COPY_BLOCK = 8 * 1024 * 1024


def install_folder(
    folder: Path,
    root: Path | None = None,
    *,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Copy a model, drafter or MTP folder into the library; return the installed folder."""
    root = Path(root) if root is not None else models_dir()
    folder = Path(folder).expanduser()
    if folder.resolve().parent == root.resolve():
        raise SourceError(f"{folder.name} is already in the library.")
    kind, files = classify_folder(folder)
    return _copy_in(folder.name, kind, files, root, {"from": str(folder)}, progress, cancel)


def install_mtp_files(
    files: list[Path],
    root: Path | None = None,
    *,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Install loose ``.safetensors`` files holding an MTP head (``mtp.*`` tensors)."""
    from engine_mlx.models.loading import check_safetensors

    root = Path(root) if root is not None else models_dir()
    files = [Path(f) for f in files]
    for file in files:
        check_safetensors(file)
    if not mtp_tensors(files):
        raise SourceError(
            f"{', '.join(f.name for f in files)}: no mtp.* tensors, so not an MTP head. Model "
            "weights need their folder: drop the folder with config.json and the tokenizer."
        )
    name = files[0].stem if len(files) == 1 else files[0].parent.name
    return _copy_in(name, "mtp", files, root, {"from": str(files[0].parent)}, progress, cancel)


def import_gguf_file(
    gguf: Path,
    root: Path | None = None,
    *,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Import a ``.gguf`` into a library folder named after it (the importer is atomic and
    skips a GGUF it already imported); ``done``/``total`` count tensors. Q4_0, Q4_1 and Q8_0
    matrices stay as the file holds them (``QUANTIZED``): a quarter of float16's size and
    bytes to read per token. A drafter's GGUF
    (llama.cpp's ``dflash`` architecture) becomes a drafter folder, when a model of the
    library fits it."""
    from engine_mlx.models.gguf import import_gguf
    from engine_mlx.models.gguf.drafter import is_drafter_gguf
    from engine_mlx.models.gguf.importer import QUANTIZED

    root = Path(root) if root is not None else models_dir()
    gguf = Path(gguf).expanduser()
    if is_drafter_gguf(gguf):
        return _import_drafter_gguf(gguf, root, progress, cancel)
    reporter = ProgressReporter(gguf.stem, 0, 1, progress)
    reporter.phase = "importing"
    reporter.file = gguf.name

    def on_tensor(done: int, total: int) -> None:
        check_cancel(cancel, f"Import of {gguf.name} cancelled; nothing was added.")
        reporter.total = reporter.file_size = total
        reporter.advance(done - reporter.done)

    folder = _import_folder(root, gguf.stem)
    out = import_gguf(gguf, folder, dtype=QUANTIZED, progress=on_tensor)
    reporter.file_finished()
    reporter.emit(force=True, phase="installed")
    return out


def _import_drafter_gguf(
    gguf: Path,
    root: Path,
    progress: ProgressCallback | None,
    cancel: threading.Event | None,
) -> Path:
    """A llama.cpp drafter read into the engine's drafter and written as its Hugging Face
    folder, once a target of the library is found that it fits (otherwise refused, with each
    target's reason): a drafter alone drafts for nothing."""
    from engine_mlx.library.catalog import describe, drafter_fit, list_installed
    from engine_mlx.models.dflash import save_dflash
    from engine_mlx.models.gguf.drafter import load_drafter_gguf

    name = gguf.stem
    if (root / name).exists():
        raise EngineError(
            f"The library already has a model named {name}: remove it first (or rename the "
            "file you are adding)."
        )
    reporter = ProgressReporter(name, 1, 1, progress)
    reporter.start_file(gguf.name, gguf.stat().st_size, 0, "importing")
    model = load_drafter_gguf(gguf)
    check_cancel(cancel, f"Import of {gguf.name} cancelled; nothing was added.")
    partial_root(root).mkdir(parents=True, exist_ok=True)
    staging = partial_root(root) / f".drafter-{name}-{uuid.uuid4().hex[:8]}"
    try:
        save_dflash(model, staging)
        drafter = describe(staging)
        targets = [m for m in list_installed(root) if m.kind == "target" and not m.problem]
        problems = {t.name: drafter_fit(drafter, t) for t in targets}
        if not any(not found for found in problems.values()):
            raise SourceError(_no_target_message(gguf.name, model.config, problems))
        installed_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        write_manifest(staging, {"kind": "drafter", "source": "gguf", "from": str(gguf),
                                 "installed_at": installed_at})  # fmt: skip
        replace_folder(staging, root / name)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    reporter.file_finished()
    reporter.emit(force=True, phase="installed")
    return root / name


def _no_target_message(file: str, config, problems: dict[str, list[str]]) -> str:
    shape = (
        f"hidden size {config.hidden_size}, vocabulary {config.vocab_size}, "
        f"{config.num_target_layers} target layers"
    )
    if not problems:
        return (
            f"{file} is a DFlash drafter ({shape}), and the library has no model for it to "
            "draft for: add the model it was trained for first, then the drafter."
        )
    reasons = "; ".join(f"{name}: {found[0]}" for name, found in sorted(problems.items()))
    return (
        f"{file} is a DFlash drafter ({shape}), but no model of the library fits it ({reasons}). "
        "Add the model it was trained for first, then the drafter."
    )


def _import_folder(root: Path, stem: str) -> Path:
    """``root/STEM``, or ``root/STEM-gguf`` when a model that is no GGUF import already has
    that name (the importer never replaces such a folder)."""
    from engine_mlx.models.gguf.importer import MARKER_NAME

    folder = root / stem
    if folder.exists() and not (folder / MARKER_NAME).is_file():
        return root / f"{stem}-gguf"
    return folder


def _copy_in(
    name: str,
    kind: str,
    files: list[Path],
    root: Path,
    extra: dict,
    progress: ProgressCallback | None,
    cancel: threading.Event | None,
) -> Path:
    target = root / name
    if target.exists():
        raise EngineError(
            f"The library already has a model named {name}: remove it first (or rename the "
            "folder you are adding)."
        )
    total = sum(f.stat().st_size for f in files)
    partial_root(root).mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(root).free
    if total > free:
        from engine_mlx.library.hub import InsufficientResourcesError
        from engine_mlx.library.units import human_bytes

        raise InsufficientResourcesError(
            f"Not enough disk space to add {name}: it needs {human_bytes(total)}, "
            f"{human_bytes(free)} free in {root}."
        )
    staging = partial_root(root) / f".copy-{name}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    reporter = ProgressReporter(name, total, len(files), progress)
    try:
        entries = []
        for file in files:
            reporter.start_file(file.name, file.stat().st_size, 0, "copying")
            digest = _copy_file(file, staging / file.name, reporter, cancel, name)
            entries.append({"path": file.name, "size": file.stat().st_size, "sha256": digest})
            reporter.file_finished()
        source = "local" if kind != "mtp" or len(files) > 1 else "file"
        write_manifest(
            staging,
            {
                "kind": kind,
                "source": source,
                **extra,
                "files": entries,
                "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        )
        replace_folder(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    reporter.emit(force=True, phase="installed")
    return target


def _copy_file(
    src: Path,
    dst: Path,
    reporter: ProgressReporter,
    cancel: threading.Event | None,
    name: str,
) -> str:
    digest = hashlib.sha256()
    with src.open("rb") as fin, dst.open("wb") as fout:
        while block := fin.read(COPY_BLOCK):
            fout.write(block)
            digest.update(block)
            reporter.advance(len(block))
            check_cancel(cancel, f"Adding {name} cancelled; nothing was added.")
    return digest.hexdigest()
