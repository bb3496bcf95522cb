"""The File menu's import and export in a real window: a conversation exported, deleted and
imported back reads the same, statistics and all; a bad file changes nothing and says why."""

from __future__ import annotations

import json
from dataclasses import replace

from app import history_transfer
from tests.app.transfer.chatgpt_export import chatgpt_export


def _reply(qtbot, win, text: str) -> None:
    win.settings = replace(win.settings, max_tokens=12, temperature=0.0)
    win.prompt_edit.setPlainText(text)
    with qtbot.waitSignal(win.worker.finished, timeout=60000):
        win.send_button.click()
    qtbot.waitUntil(lambda: not win.generating, timeout=5000)


def test_exported_deleted_and_imported_back_reads_the_same(qtbot, make_window, tmp_path):
    win = make_window()
    _reply(qtbot, win, "Hello there")
    before = win.chat.browser.toPlainText()
    stats = win.store.messages(win.conversation_id)[-1].stats
    assert stats["model"] and stats["sampling"]["temperature"] == 0.0  # what it was asked of
    assert "tok/s" in before
    out = tmp_path / "export.json"
    assert win.transfer.export_to(out, "json", [win.conversation_id])
    assert "Exported 1 conversation to export.json" in win.statusBar().currentMessage()
    win.conversations.delete(win.conversation_id, "", confirm=False)
    assert win.conversations.list.count() == 0
    assert win.transfer.import_from(out)
    assert win.conversations.list.count() == 1
    qtbot.waitUntil(lambda: win.chat.browser.toPlainText() == before, timeout=5000)
    assert win.store.messages(win.conversation_id)[-1].stats == stats
    assert "Imported 1 conversation" in win.statusBar().currentMessage()


def test_a_bad_file_is_refused_with_its_reason_and_nothing_changes(
    qtbot, make_window, tmp_path, monkeypatch
):
    win = make_window()
    shown = []
    monkeypatch.setattr(
        history_transfer.QMessageBox, "warning", lambda _w, title, text: shown.append(text)
    )
    bad = tmp_path / "broken.json"
    bad.write_text('{"format": "flashchat.conversations", "version": 1, "conversations": [1]}')
    assert not win.transfer.import_from(bad)
    assert shown == ["broken.json: Conversation 1 is not an object."]
    assert win.store.list_conversations() == []


def test_a_chatgpt_export_imports_from_the_menu(qtbot, make_window, tmp_path, monkeypatch):
    win = make_window()
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(chatgpt_export()))
    monkeypatch.setattr(
        history_transfer.QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), "")
    )
    win.transfer.import_action.trigger()
    assert [c.title for c in win.store.list_conversations()] == ["Compute 2**10", "Reversing lists"]
    shown = win.chat.browser.toPlainText
    qtbot.waitUntil(lambda: "How do I reverse a list in Python?" in shown(), timeout=5000)


def test_the_list_exports_its_selection(qtbot, make_window, tmp_path, monkeypatch):
    win = make_window()
    for title in ("one", "two", "three"):
        win.store.create_conversation(title)
    win.conversations.refresh()
    items = [win.conversations.list.item(row) for row in range(3)]
    items[0].setSelected(True)
    items[2].setSelected(True)
    ids = win.conversations.export_ids(items[2])
    assert sorted(ids) == sorted(int(i.data(0x0100)) for i in (items[0], items[2]))
    assert win.conversations.export_ids(items[1]) == [int(items[1].data(0x0100))]
    out = tmp_path / "two.md"
    monkeypatch.setattr(
        history_transfer.QFileDialog,
        "getSaveFileName",
        lambda *a, **k: (str(out), history_transfer.EXPORT_FILTERS["md"]),
    )
    win.conversations.export_requested.emit(ids)
    text = out.read_text()
    assert "# three" in text and "# one" in text and "# two" not in text
