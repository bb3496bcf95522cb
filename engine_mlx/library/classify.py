"""What a folder holds (a model, a DFlash drafter or an MTP head) and whether it would load.

Installing a local folder and finishing a download both ask this before a folder enters the
library, with the loader's own checks, so the library never holds something that only fails
later, when it is listed or loaded.
"""

from __future__ import annotations

from pathlib import Path

from engine_mlx.errors import ModelLoadError
from engine_mlx.library.catalog import mtp_tensors
from engine_mlx.library.hub import TARGET_EXTRA_FILES, is_drafter_config
from engine_mlx.models.dflash import DFlashConfig
from engine_mlx.models.loading import check_safetensors, read_config, validate_model_folder


def classify_folder(folder: Path) -> tuple[str, list[Path]]:
    """(kind, files to copy) for a folder, or the ModelLoadError that loading would raise."""
    if not (folder / "config.json").is_file():
        weights = sorted(folder.glob("*.safetensors"))
        if weights and mtp_tensors(weights):  # reads and checks every header
            return "mtp", weights
        validate_model_folder(folder)  # raises the loader's own "config.json is missing"
    config = read_config(folder)
    if is_drafter_config(config):
        DFlashConfig.from_dict(config, f"{folder.name}/config.json")
        weights = sorted(folder.glob("*.safetensors"))
        if not weights:
            raise ModelLoadError(f"{folder.name}: a DFlash drafter without .safetensors weights.")
        for file in weights:
            check_safetensors(file)
        return "drafter", [folder / "config.json", *weights]
    validate_model_folder(folder)
    files = sorted(folder.glob("model*.safetensors"))
    files += [folder / n for n in TARGET_EXTRA_FILES if (folder / n).is_file()]
    return "target", sorted(set(files))
