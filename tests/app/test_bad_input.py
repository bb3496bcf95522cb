"""The window keeps running on bad input: an unusable history file, text that is not UTF-8,
a broken model in the library, a drafter that does not fit. Each is shown in the window with
what to do, and nothing is deleted."""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from app.main_window import MainWindow
from app.storage import ConversationStore


def send(qtbot, win: MainWindow, text: str) -> str:
    win.settings = replace(win.settings, max_tokens=4, temperature=0.0)
    win.prompt_edit.setPlainText(text)
    with qtbot.waitSignal(win.worker.finished, timeout=60000) as blocker:
        win.send_button.click()
    qtbot.waitUntil(lambda: not win.generating, timeout=5000)
    return blocker.args[0].text


def test_damaged_history_opens_the_window_and_can_be_moved_aside(
    qtbot, make_window, tmp_path: Path
) -> None:
    """Regression (#4): a traceback on stderr and no window."""
    db = tmp_path / "chats.sqlite3"
    damaged = b"SQLite format 3\x00" + bytes(range(256)) * 8
    db.write_bytes(damaged)
    win = make_window(db=db)
    assert win.storage_banner.isVisible()
    assert str(db) in win.storage_label.text() and "not saved" in win.storage_label.text()
    assert win.storage_fresh_button.isVisible()
    assert send(qtbot, win, "Hello")  # the chat works meanwhile (in memory)
    assert db.read_bytes() == damaged  # untouched until the person decides
    win.storage_fresh_button.click()
    assert not win.storage_banner.isVisible()
    (aside,) = tmp_path.glob("chats.sqlite3.unusable-*")
    assert aside.read_bytes() == damaged  # moved, not deleted
    send(qtbot, win, "Hello again")
    with ConversationStore(db) as store:  # the fresh file holds the new chat
        (conv,) = store.list_conversations()
        assert [m.role for m in store.messages(conv.id)] == ["user", "assistant"]


def test_history_from_a_newer_version_is_explained(qtbot, make_window, tmp_path: Path) -> None:
    db = tmp_path / "chats.sqlite3"
    ConversationStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 99")
    win = make_window(db=db)
    assert win.storage_banner.isVisible() and "newer FlashChat" in win.storage_label.text()


def test_message_that_is_not_utf8_shows_and_the_chat_goes_on(
    qtbot, make_window, tmp_path: Path
) -> None:
    """Regression (#4): its conversation showed empty; sending there gave no reply."""
    db = tmp_path / "chats.sqlite3"
    with ConversationStore(db) as store:
        conv = store.create_conversation("Imported")
        message = store.add_message(conv.id, "user", "placeholder")
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE messages SET content = CAST(x'636166e920' AS TEXT) WHERE id = ?",
            (message.id,),
        )
    win = make_window(db=db)
    win.conversations.select(conv.id)
    assert win.conversation_id == conv.id
    assert win.chat.message_text(message.id) == "caf\ufffd "
    assert send(qtbot, win, "Hello")
    assert not win.storage_banner.isVisible() and not win.error_label.isVisible()
    roles = [m.role for m in win.store.messages(conv.id)]
    assert roles == ["user", "user", "assistant"]


def test_broken_model_in_the_library_does_not_stop_the_app(
    qtbot, make_window, tmp_path: Path, tiny_model_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (#2): the library view's refresh raised and the app aborted at start."""
    monkeypatch.setenv("FLASHCHAT_HOME", str(tmp_path / "home"))
    broken = shutil.copytree(tiny_model_dir("qwen3"), tmp_path / "home" / "models" / "broken")
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "hidden_size": "abc"}))
    win = make_window()
    assert "1 will not load" in win.model_bar.library_button.text()
    assert "broken" in win.model_bar.library_button.toolTip()
    win.open_library()
    assert "Will not load" in win.library_view.pairing_text("broken")
    assert "'hidden_size'" in win.library_view.pairing_text("broken")


def test_drafter_that_does_not_fit_leaves_the_model_loaded(
    qtbot, make_window, tmp_path: Path, companions
) -> None:
    """Regression (#6): the app was left with no model."""
    win = make_window(drafter=str(companions["other_vocab"]))
    qtbot.waitUntil(lambda: win.error_label.isVisible(), timeout=10000)
    assert "without this drafter" in win.error_label.text()
    assert "dflash2" not in win.available_modes and "ar" in win.available_modes
    assert send(qtbot, win, "Hello")
