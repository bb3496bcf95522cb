"""A thinking model in the window: the Think toggle, reasoning streamed into a block that
folds away when the answer starts, kept with the reply, and each chat's own choice."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QApplication


def _window(qtbot, make_window, thinking_target):
    folder = thinking_target("qwen3", "qwen3_5").spec.path
    win = make_window(model=str(folder))
    qtbot.waitUntil(lambda: win.send_button.isEnabled(), timeout=30000)
    win.settings = replace(win.settings, max_tokens=12, temperature=0.0, thinking_budget=4)
    return win


def _send(qtbot, win, text):
    win.prompt_edit.setPlainText(text)
    with qtbot.waitSignal(win.worker.finished, timeout=60000) as blocker:
        win.send_button.click()
    qtbot.waitUntil(lambda: not win.generating, timeout=5000)
    return blocker.args[0]


def test_reasoning_folds_above_the_answer_and_is_kept(qtbot, make_window, thinking_target):
    win = _window(qtbot, make_window, thinking_target)
    assert win.think_box.isVisible() and win.think_box.isChecked()
    seen_parts = []
    win.worker.segments.connect(lambda u: seen_parts.append(u.latest.part if u.latest else ""))
    finished = _send(qtbot, win, "Why is the sky blue?")
    assert finished.reasoning and "reasoning" in seen_parts
    stored = win.store.messages(win.conversation_id)[-1]
    assert stored.reasoning == finished.reasoning
    assert stored.stats["segments"]["reasoning"]["tokens"] >= 1
    shown = win.chat.browser.toPlainText()
    assert "Thought for" in shown and finished.reasoning.strip() not in shown  # folded
    win.chat.toggle_reasoning(str(stored.id))
    assert win.chat.reasoning_open(stored.id)
    assert finished.reasoning.strip()[:8] in win.chat.browser.toPlainText()
    win.chat._on_anchor(QUrl(f"flashchat:copyall/{stored.id}"))
    copied = QApplication.clipboard().text()
    assert copied.startswith(">") and copied.endswith(stored.content)


def test_think_off_is_kept_per_conversation(qtbot, make_window, thinking_target):
    win = _window(qtbot, make_window, thinking_target)
    win.think_box.setChecked(False)
    finished = _send(qtbot, win, "Hello")
    assert finished.reasoning == ""
    quiet = win.conversation_id
    assert win.store.think(quiet) is False
    win.new_chat()
    assert not win.think_box.isChecked()  # new chats start from the last choice
    win.think_box.setChecked(True)
    _send(qtbot, win, "Hello again")
    thinking = win.conversation_id
    win.open_conversation(quiet)
    assert not win.think_box.isChecked()
    win.open_conversation(thinking)
    assert win.think_box.isChecked()


def test_a_model_that_does_not_think_shows_no_toggle(qtbot, make_window):
    win = make_window()
    assert not win.think_box.isVisible()
    assert "thinking" not in win._generation_settings()
