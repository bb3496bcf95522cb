"""A reply cut off by a crash keeps what was generated: the text so far is written every few
seconds while it streams, marked interrupted until the whole reply replaces it, and a window
opened afterwards shows it as interrupted, with Regenerate."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Slot

import app.reply_keeper as reply_keeper
from app.reply_keeper import INTERRUPTED, SAVE_EVERY_S, ReplyKeeper
from app.storage import ConversationStore


class Watcher(QObject):
    """Looks at the history on the GUI thread each time the window has taken an update in
    (its slot is connected after the window's, so it runs after it)."""

    def __init__(self, win) -> None:
        super().__init__()
        self.win, self.seen = win, []

    @Slot(object)
    def look(self, _update: object) -> None:
        (*_, last) = self.win.store.messages(self.win.conversation_id)
        self.seen.append((last.role, (last.stats or {}).get("reason", "")))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_text_so_far_is_written_every_few_seconds_then_replaced(store) -> None:
    conv = store.create_conversation("Story")
    store.add_message(conv.id, "user", "Tell me a story")
    clock = Clock()
    keeper = ReplyKeeper(lambda: store, clock)
    keeper.start(conv.id, {"model": "tiny"})
    keeper.add("Once", "")
    assert [m.role for m in store.messages(conv.id)] == ["user"]  # not yet: too soon
    clock.now += SAVE_EVERY_S
    keeper.add(" upon", "")
    kept = store.messages(conv.id)[-1]
    assert kept.content == "Once upon" and kept.stats == {"reason": INTERRUPTED, "model": "tiny"}
    keeper.add(" a time", "")  # too soon again
    clock.now += SAVE_EVERY_S
    keeper.add(".", "")
    assert store.messages(conv.id)[-1].content == "Once upon a time."
    stats = keeper.final_stats({"reason": "eos", "tau": float("nan")})
    message_id = keeper.finish("Once upon a time. The end.", "", stats)
    messages = store.messages(conv.id)
    assert [m.role for m in messages] == ["user", "assistant"] and messages[-1].id == message_id
    assert messages[-1].content == "Once upon a time. The end."
    assert messages[-1].stats == {"reason": "eos", "tau": None, "model": "tiny"}
    assert keeper.saved


def test_a_crash_mid_reply_leaves_it_interrupted_with_regenerate(
    qtbot, make_window, tmp_path: Path
) -> None:
    db = tmp_path / "chats.sqlite3"
    with ConversationStore(db) as store:  # what a crash 3 s into a reply leaves behind
        conv = store.create_conversation("Hello there")
        store.add_message(conv.id, "user", "Hello there")
        clock = Clock()
        keeper = ReplyKeeper(lambda: store, clock)
        keeper.start(conv.id, {})
        clock.now += SAVE_EVERY_S
        keeper.add("Half a rep", "")
        partial = keeper.message_id
    win = make_window(db=db)
    win.open_conversation(conv.id)
    assert "Half a rep" in win.chat.browser.toPlainText()
    assert "interrupted" in win.chat.browser.toPlainText()
    assert "Regenerate" in win.chat.browser.toPlainText()
    win.settings = replace(win.settings, max_tokens=6, temperature=0.0)
    with qtbot.waitSignal(win.worker.finished, timeout=60000):
        win.regenerate(partial)
    qtbot.waitUntil(lambda: not win.generating, timeout=5000)
    messages = win.store.messages(conv.id)
    assert [m.role for m in messages] == ["user", "assistant"] and messages[-1].id != partial
    assert messages[-1].stats["reason"] != INTERRUPTED


def test_the_window_keeps_the_reply_while_it_streams(qtbot, make_window, monkeypatch) -> None:
    monkeypatch.setattr(reply_keeper, "SAVE_EVERY_S", 0.0)  # write at every update
    win = make_window()
    watcher = Watcher(win)
    win.worker.segments.connect(watcher.look)
    win.settings = replace(win.settings, max_tokens=12, temperature=0.0)
    win.prompt_edit.setPlainText("Hello there")
    with qtbot.waitSignal(win.worker.finished, timeout=60000) as blocker:
        win.send_button.click()
    qtbot.waitUntil(lambda: not win.generating, timeout=5000)
    assert ("assistant", INTERRUPTED) in watcher.seen  # kept, and marked, while it streamed
    messages = win.store.messages(win.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]  # then replaced, not added
    assert messages[-1].content == blocker.args[0].text
    assert messages[-1].stats["reason"] == blocker.args[0].reason
