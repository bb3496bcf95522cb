"""Where the history file lives, and moving one that cannot be used aside (nothing deleted)."""

from __future__ import annotations

import time
from pathlib import Path

from app.settings import AppSettings, load_settings
from app.storage import ConversationStore, StorageError
from engine_mlx.paths import user_data_dir


def move_aside(path: Path) -> Path:
    """Rename a history file that cannot be used (with its ``-wal`` and ``-shm`` files) to
    ``NAME.unusable-YYYYmmdd-HHMMSS``, so a fresh one can start; nothing is deleted. Returns
    the new name of the main file."""
    path = Path(path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.unusable-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.unusable-{stamp}-{n}")
    try:
        for suffix in ("-wal", "-shm", ""):  # the main file last: it names the set
            companion = path.with_name(path.name + suffix)
            if companion.exists():
                companion.rename(aside.with_name(aside.name + suffix))
    except OSError as exc:
        raise StorageError(f"Could not move {path} aside ({exc}); move it by hand.") from exc
    return aside


def default_database_path() -> Path:
    """The history file in FlashChat's data folder (FLASHCHAT_HOME overrides the folder)."""
    return user_data_dir() / "flashchat.sqlite3"


def open_history(path: Path) -> tuple[ConversationStore, AppSettings, StorageError | None]:
    """The history file, its settings, and None — or, when the file cannot be used, a store in
    memory (the window works, nothing is saved), what it could read, and the reason."""
    problem = None
    try:
        store = ConversationStore(path)
    except StorageError as exc:
        problem = exc
        store = ConversationStore.temporary()
    try:
        return store, load_settings(store), problem
    except StorageError as exc:
        return store, AppSettings(), problem or exc
