"""Where FlashChat keeps its data: the platform's user data folder (FLASHCHAT_HOME overrides,
which tests and CI use to stay out of the user's real folder)."""

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
