"""``export-drafter``: a drafter in the two forms llama.cpp takes, a GGUF its server loads and
a Hugging Face folder its converter (``convert_hf_to_gguf.py --target-model-dir``) reads."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine_mlx.errors import ModelLoadError
from engine_mlx.models.dflash import save_dflash
from engine_mlx.models.drafters import load_drafter
from engine_mlx.models.gguf.drafter import TYPES, write_drafter_gguf


def export_drafter(
    drafter: str | Path,
    out: str | Path,
    *,
    form: str = "gguf",
    qtype: str = "f32",
    tokenizer_gguf: str | Path | None = None,
) -> Path:
    """Write the drafter at ``drafter`` (a folder or a drafter GGUF) into the folder
    ``out``; returns the file or folder written. A GGUF takes the target's tokenizer from
    ``tokenizer_gguf``, the target's own GGUF."""
    source = Path(drafter).expanduser()
    model = load_drafter(source)
    if source.is_dir() and (source / "draft_vocab.npy").is_file():
        raise ModelLoadError(
            f"{source.name} proposes from its own draft vocabulary, which llama.cpp cannot "
            "read the same way (its d2t is fixed; FlashChat's adds the context's tokens)."
        )
    if model.config.local_conv_kernel:
        raise ModelLoadError(
            f"{source.name} is FlashChat's first DFlash2 variant (local_conv_kernel), which "
            "llama.cpp does not run: only DFlash v1 and llama.cpp's DFlash2 export."
        )
    folder = Path(out).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    name = source.stem if source.is_file() else source.name
    if form == "hf":
        target = folder / name
        tmp = folder / f".{name}.writing"
        shutil.rmtree(tmp, ignore_errors=True)
        save_dflash(model, tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.replace(target)
        return target
    if form != "gguf":
        raise ValueError(f"unknown format {form!r}: gguf or hf")
    if qtype not in TYPES:
        raise ValueError(f"unknown type {qtype!r}: {', '.join(TYPES)}")
    if tokenizer_gguf is None or not Path(tokenizer_gguf).is_file():
        raise ModelLoadError(
            "A drafter GGUF carries its target's tokenizer: pass --target-gguf, the target's "
            "own .gguf file."
        )
    final = folder / f"{name}-{qtype.upper()}.gguf"
    tmp = final.with_suffix(".gguf.writing")
    try:
        write_drafter_gguf(model, tmp, tokenizer_gguf, qtype)
    except ValueError as exc:
        tmp.unlink(missing_ok=True)
        raise ModelLoadError(f"{name}: {exc}") from exc
    tmp.replace(final)
    return final
