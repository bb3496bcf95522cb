"""Where FlashChat keeps its data: the platform's user data folder (FLASHCHAT_HOME overrides,
which tests and CI use to stay out of the user's real folder), and its cache of things built or
measured on this machine (compiled CPU code, the BLAS choice), which may be deleted any time."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def user_data_dir() -> Path:
    override = os.environ.get("FLASHCHAT_HOME")
    if override:
        return Path(override).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "FlashChat"
    if sys.platform.startswith("win"):
        return Path(os.environ.get("APPDATA", Path.home())) / "FlashChat"
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "flashchat"


def models_dir() -> Path:
    return user_data_dir() / "models"


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/flashchat`` (``~/.cache/flashchat``; ``~/Library/Caches`` on macOS)."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "FlashChat"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "flashchat"


def kernel_cache_dir() -> Path:
    """Compiled CPU code (the kernel emulator, the small-batch product);
    ``FLASHCHAT_KERNEL_CACHE`` overrides."""
    explicit = os.environ.get("FLASHCHAT_KERNEL_CACHE")
    return Path(explicit) if explicit else cache_dir() / "kernels"


def step_costs_dir() -> Path:
    """This machine's calibrated step costs, one file per model; ``FLASHCHAT_STEP_COSTS``
    overrides (the tests' tiny models are calibrated there, not in the user's cache)."""
    explicit = os.environ.get("FLASHCHAT_STEP_COSTS")
    return Path(explicit) if explicit else cache_dir() / "step-costs"
