"""Import a llama.cpp GGUF file into a Hugging Face-layout model folder.

Why a folder and not "load the GGUF directly": ``mlx_lm.load`` (and every transformers-style
tool) wants ``config.json`` + ``model*.safetensors`` + ``tokenizer.json``.  GGUF keeps the same
information in its own vocabulary (llama.cpp tensor names, Q/K rows permuted for llama.cpp's
RoPE, the tokenizer as flat metadata arrays), so we translate it once, and from then on the
folder loads like any other model. The weights go in as a plain float dtype, or (``QUANTIZED``)
with the file's Q4_0, Q4_1 and Q8_0 matrices kept as they are in MLX's affine layout: the same
bits llama.cpp multiplies, at a quarter of float16's bytes, which is what decoding on a CPU
waits for (the float16 copy of SmolLM2-135M decoded at 0.12x llama.cpp's speed on the same file).

This module owns the folder: the import is atomic (written into a hidden sibling folder,
renamed into place when complete) and idempotent (a marker file records which GGUF and settings
produced the folder).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx

from engine_mlx.errors import GGUFImportError
from engine_mlx.models.gguf.architecture import (
    DecoderSpec,
    decoder_spec,
    hf_config,
    tensor_plan,
    unpermute_qk,
)
from engine_mlx.models.gguf.reader import (
    GGUF_GROUP,
    GGUFFile,
    load_mx_native,
    read_gguf,
    take_dequantized,
    take_quantized,
)
from engine_mlx.models.gguf.tokenizer import tokenizer_files

MARKER_NAME = "flashchat_import.json"
"""Written last into a finished import; a folder without it is never taken for finished."""

FORMAT_VERSION = 1
"""Bump when the folder layout changes, so older imports are redone rather than trusted."""

SUPPORTED_DTYPES: dict[str, mx.Dtype] = {
    "float16": mx.float16,
    "bfloat16": mx.bfloat16,
    "float32": mx.float32,
}

QUANTIZED = "quantized"
"""The form that keeps Q4_0, Q4_1 and Q8_0 matrices quantized and stores the rest as float16."""

FORMS = (*SUPPORTED_DTYPES, QUANTIZED)

_SHARD_BYTES = 4 * 1024**3
"""Weights above this size are split into several safetensors files (HF's sharded layout), so
that no single tensor batch has to be held in memory at once and files stay copyable."""


def import_gguf(
    gguf_path: str | Path,
    out_dir: str | Path,
    *,
    dtype: str = "float16",
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Convert ``gguf_path`` into a HF-layout folder at ``out_dir`` and return ``out_dir``.

    Returns at once when ``out_dir`` already holds a finished import of the same file (same
    name, size and mtime) with the same ``dtype``.  Every failure a person can act on (missing,
    truncated, not GGUF, unsupported architecture/tensor type/tokenizer, missing metadata or
    tensors, unwritable destination) raises :class:`GGUFImportError` naming the file.
    ``progress(done, total)`` is called after each weight tensor, for a UI progress bar.
    """
    src = Path(gguf_path)
    out = Path(out_dir)
    target = _target_dtype(dtype, src)
    stat = _stat_source(src)
    if is_imported(out, src, dtype):
        return out

    gguf = read_gguf(src)
    spec = decoder_spec(gguf)
    tok_files = tokenizer_files(  # built before the heavy work: fail fast
        gguf, vocab_size=spec.vocab_size, context_length=spec.context_length
    )
    float_name = "float16" if dtype == QUANTIZED else dtype
    config = hf_config(spec, float_name, tok_files["generation_config.json"])

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_work_dirs(out)
        if out.exists() or out.is_symlink():
            _check_replaceable(out, src)
        tmp = out.parent / f".{out.name}.importing-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
    except OSError as exc:
        raise GGUFImportError(f"Cannot import {src.name}: cannot create {out}: {exc}") from exc

    try:
        for name, content in tok_files.items():
            if isinstance(content, str):
                (tmp / name).write_text(content, encoding="utf-8")
            else:
                _write_json(tmp / name, content)
        weight_files, kept = _write_weights(
            gguf, spec, tmp, target, keep_quantized=dtype == QUANTIZED, progress=progress
        )
        if kept:
            config["quantization"] = _quantization_config(kept)
        _write_json(tmp / "config.json", config)
        marker = _marker(src, stat, dtype)
        marker["files"] = sorted([*weight_files, "config.json", *tok_files])
        _write_json(tmp / MARKER_NAME, marker)  # last: its presence means "complete"
        _move_into_place(tmp, out)
    except OSError as exc:
        raise GGUFImportError(f"Cannot import {src.name}: writing {out} failed: {exc}") from exc
    except MemoryError:
        raise GGUFImportError(
            f"Cannot import {src.name}: not enough memory to convert it as {dtype}"
        ) from None
    except (RuntimeError, ValueError) as exc:  # mlx/numpy choking on data the header allowed
        raise GGUFImportError(
            f"Cannot import {src.name}: converting tensors failed: {exc}"
        ) from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def is_imported(out_dir: str | Path, gguf_path: str | Path, dtype: str = "float16") -> bool:
    """True when ``out_dir`` is a finished import of this very GGUF file at ``dtype``.

    "This very file" means same name, size and modification time: cheap to check and enough
    to notice that the user replaced the GGUF.  Never raises.
    """
    out = Path(out_dir)
    try:
        stat = Path(gguf_path).stat()
    except OSError:
        return False
    marker = _read_marker(out)
    if marker is None:
        return False
    expected = _marker(Path(gguf_path), stat, dtype)
    if any(marker.get(key) != value for key, value in expected.items()):
        return False
    files = marker.get("files")
    if not isinstance(files, list) or not files:
        return False
    return all(isinstance(f, str) and (out / f).is_file() for f in files)


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


def _target_dtype(dtype: str, src: Path) -> mx.Dtype:
    """The float dtype the import writes (``QUANTIZED``: float16 for what it does not keep)."""
    if dtype == QUANTIZED:
        return mx.float16
    try:
        return SUPPORTED_DTYPES[dtype]
    except (KeyError, TypeError):
        raise GGUFImportError(
            f"Cannot import {src.name} as dtype {dtype!r}: choose one of {', '.join(FORMS)}"
        ) from None


def _stat_source(src: Path) -> os.stat_result:
    try:
        stat = src.stat()
    except FileNotFoundError:
        raise GGUFImportError(f"GGUF file not found: {src}") from None
    except OSError as exc:
        raise GGUFImportError(f"Cannot read GGUF file {src}: {exc}") from exc
    if not src.is_file():
        raise GGUFImportError(f"{src.name} is not a file: {src}")
    return stat


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------


def _write_weights(
    g: GGUFFile,
    spec: DecoderSpec,
    folder: Path,
    dtype: mx.Dtype,
    *,
    keep_quantized: bool,
    progress: Callable[[int, int], None] | None,
) -> tuple[list[str], dict[str, int]]:
    """Rename and un-permute every tensor, dequantized to ``dtype`` unless ``keep_quantized``
    keeps it as MLX holds it; write (possibly sharded) safetensors. Returns the files and the
    kept matrices' bits by module path."""
    plan = list(tensor_plan(spec))
    itemsize = dtype.size
    sizes = [math.prod(shape) * itemsize for _g, _h, shape, _n in plan]
    total = sum(sizes)
    shards: list[list[int]] = [[]]
    used = 0
    for i, nbytes in enumerate(sizes):
        if shards[-1] and used + nbytes > _SHARD_BYTES:
            shards.append([])
            used = 0
        shards[-1].append(i)
        used += nbytes
    names = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors" for k in range(len(shards))]
    )

    loaded = load_mx_native(g)
    weight_map: dict[str, str] = {}
    kept: dict[str, int] = {}
    done = 0
    for shard, file_name in zip(shards, names, strict=True):
        arrays: dict[str, mx.array] = {}
        for i in shard:
            gname, hf_name, _shape, heads = plan[i]
            triple = take_quantized(loaded, g.tensors[gname]) if keep_quantized else None
            if triple is None:
                parts = {hf_name: _float_weight(g, loaded, gname, heads).astype(dtype)}
            else:
                weight, scales, biases, kept[hf_name.removesuffix(".weight")] = triple
                base = hf_name.removesuffix("weight")
                named = {"weight": weight, "scales": scales, "biases": biases}
                parts = {base + k: unpermute_qk(v, heads) if heads else v for k, v in named.items()}
            mx.eval(list(parts.values()))
            arrays.update(parts)
            weight_map.update(dict.fromkeys(parts, file_name))
            done += 1
            if progress is not None:
                progress(done, len(plan))
        mx.save_safetensors(str(folder / file_name), arrays, metadata={"format": "pt"})
        del arrays
    if len(names) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        _write_json(folder / "model.safetensors.index.json", index)
        return [*names, "model.safetensors.index.json"], kept
    return names, kept


def _float_weight(
    g: GGUFFile, loaded: dict[str, mx.array] | None, name: str, heads: int
) -> mx.array:
    w = take_dequantized(g, loaded, g.tensors[name])
    return unpermute_qk(w, heads) if heads else w


def _quantization_config(kept: dict[str, int]) -> dict[str, Any]:
    """config.json's ``quantization`` block (mlx-lm's form): the most common bits as the
    default, every kept module named with its own, so a module without scales stays float."""
    bits = max(set(kept.values()), key=list(kept.values()).count)
    block: dict[str, Any] = {"group_size": GGUF_GROUP, "bits": bits}
    block.update({path: {"group_size": GGUF_GROUP, "bits": b} for path, b in kept.items()})
    return block


# --------------------------------------------------------------------------------------------
# Files: marker, atomic replacement, leftovers
# --------------------------------------------------------------------------------------------


def _marker(src: Path, stat: os.stat_result, dtype: str) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "source_name": src.name,
        "source_size": stat.st_size,
        "source_mtime_ns": stat.st_mtime_ns,
        "dtype": dtype,
    }


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _check_replaceable(out: Path, src: Path) -> None:
    """Refuse to replace anything but an empty folder or an earlier import of ours.

    An earlier import is a folder whose marker lists its files and that holds nothing else.
    Any other folder is somebody's (a downloaded model, a copy, a half-edited folder): it is
    never deleted, whatever its file names look like. The importer never leaves a marker-less
    folder of its own behind (it writes into a hidden sibling and renames it when complete).
    """
    if out.is_symlink() or not out.is_dir():
        raise GGUFImportError(f"Cannot import {src.name}: {out} exists and is not a folder")
    present = {p.name for p in out.iterdir()}
    if not present:
        return
    marker = _read_marker(out)
    listed = marker.get("files") if marker else None
    if isinstance(listed, list) and present <= {MARKER_NAME, *map(str, listed)}:
        return  # an earlier import of something else (or another dtype): ours to replace
    others = sorted(present - {MARKER_NAME, *map(str, listed or [])})
    raise GGUFImportError(
        f"Cannot import {src.name}: {out} already exists and holds files FlashChat did not "
        f"write ({', '.join(others[:3])}); nothing was changed. Choose a new or empty folder."
    )


def _read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        marker = json.loads((folder / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished folder to ``out``; an older folder there is moved aside first."""
    if out.exists() or out.is_symlink():
        old = out.parent / f".{out.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.replace(out, old)
        try:
            os.replace(tmp, out)
        except OSError:
            os.replace(old, out)  # put the previous import back rather than leave nothing
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


def _remove_stale_work_dirs(out: Path) -> None:
    """Delete work folders left by imports that were killed (their process is gone)."""
    if os.name != "posix":
        return
    for prefix in (f".{out.name}.importing-", f".{out.name}.old-"):
        for path in out.parent.glob(prefix + "*"):
            pid_text = path.name[len(prefix) :].split("-", 1)[0]
            if not pid_text.isdigit() or not path.is_dir():
                continue
            pid = int(pid_text)
            if pid != os.getpid() and not _pid_alive(pid):
                shutil.rmtree(path, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
