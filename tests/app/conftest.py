"""App tests: windows on a tiny model; tests that add models use the library's local hub
and tiny companions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.main_window import MainWindow
from app.storage import ConversationStore
from tests.support.library_fixtures import (  # noqa: F401  (fixtures)
    companions,
    hf_weights,
    hub,
    publish,
    tiny_gguf,
    tiny_vocab,
)


@pytest.fixture
def make_window(qtbot, tiny_model_dir, tmp_path):
    """``make_window(model=None, drafter="", db=None)``: a shown window on the tiny qwen3
    model (waits until it is loaded) or on ``model``, with its history in ``db``."""
    windows = []

    def make(model: str | None = None, drafter: str = "", db: Path | None = None) -> MainWindow:
        win = MainWindow(
            model if model is not None else str(tiny_model_dir("qwen3")),
            drafter,
            db_path=db or tmp_path / "chats.sqlite3",
        )
        qtbot.addWidget(win)
        win.show()
        windows.append(win)
        if model is None:
            qtbot.waitUntil(lambda: win.send_button.isEnabled(), timeout=30000)
        return win

    yield make
    for win in windows:
        if win.isVisible():
            win.close()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where a test's history file goes (not created)."""
    return tmp_path / "data" / "history.sqlite3"


@pytest.fixture
def store(db_path: Path) -> Iterator[ConversationStore]:
    """A history file opened at ``db_path``, closed after the test."""
    with ConversationStore(db_path) as opened:
        yield opened
