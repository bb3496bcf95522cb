"""A window pointed at a ``serve`` process: Connect… finds its model, the reply streams into
the chat and is stored like any other; the panel shows speed measured from the stream."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.connect_dialog import ConnectDialog


@pytest.mark.slow  # a server process
def test_connect_and_chat_with_a_remote_model(qtbot, make_window, monkeypatch, serve_process):
    win = make_window()
    dialog = ConnectDialog(win)
    dialog.url.setText(serve_process)  # no /v1: added
    dialog.find_models()
    qtbot.waitUntil(lambda: dialog.models.count() == 1, timeout=30000)
    endpoint = dialog.endpoint()
    assert endpoint.base_url == serve_process + "/v1"
    monkeypatch.setattr(ConnectDialog, "exec", lambda self: True)
    monkeypatch.setattr(ConnectDialog, "endpoint", lambda self: endpoint)
    with qtbot.waitSignal(win.worker.model_loaded, timeout=30000):
        win.open_connect()
    qtbot.waitUntil(win.send_button.isEnabled, timeout=10000)
    assert win.model_bar.target_box.currentText() == endpoint.label
    assert "Remote" in win.statusBar().currentMessage()

    win.settings = replace(win.settings, max_tokens=12, temperature=0.0)
    streamed: list[str] = []
    win.worker.segments.connect(lambda update: streamed.extend(t for t, _ in update.segments))
    win.prompt_edit.setPlainText("Hello there")
    with qtbot.waitSignal(win.worker.finished, timeout=60000) as blocker:
        win.send_button.click()
    (finished,) = blocker.args
    qtbot.waitUntil(lambda: not win.generating, timeout=5000)  # the window stored it
    assert finished.text and "".join(streamed) == finished.text
    messages = win.store.messages(win.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].content == finished.text
    assert messages[1].stats["tau"] == 1.0  # the FlashChat server reports its counts
    assert win.panel.rate_label.text() not in ("", "–")

    again = make_window(db=win.db_path)  # the connection is remembered
    labels = [
        again.model_bar.target_box.itemText(i) for i in range(again.model_bar.target_box.count())
    ]
    assert endpoint.label in labels
