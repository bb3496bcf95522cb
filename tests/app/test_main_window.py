"""The first window streams a reply from the engine running on a worker thread."""

from __future__ import annotations

import threading

import pytest

from app.main_window import MainWindow


@pytest.fixture
def window(qtbot, tiny_model_dir):
    win = MainWindow(str(tiny_model_dir("qwen3")))
    qtbot.addWidget(win)
    qtbot.waitUntil(lambda: win.send_button.isEnabled(), timeout=30000)
    yield win
    win.close()


def test_streams_a_reply_on_a_worker_thread(qtbot, window):
    assert "tiny_qwen3" in window.model_label.text()
    deltas: list[str] = []
    window.worker.text_delta.connect(lambda text, *_: deltas.append(text))
    window.prompt_edit.setPlainText("Hello there")
    window.max_tokens.setValue(40)
    with qtbot.waitSignal(window.worker.finished, timeout=30000) as blocker:
        window.send_button.click()
    reason, stats = blocker.args
    assert reason in ("eos", "max_tokens")
    assert stats["generated_tokens"] >= 1
    assert window.reply_view.toPlainText() == "".join(deltas)
    assert "tok/s" in window.speed_label.text()
    assert window.worker.generation_thread_id not in (None, threading.get_ident())


def test_stop_cancels(qtbot, window):
    window.prompt_edit.setPlainText("Hello")
    window.max_tokens.setValue(8000)
    window.worker.text_delta.connect(lambda *_: window.stop())
    with qtbot.waitSignal(window.worker.finished, timeout=30000) as blocker:
        window.send_button.click()
    reason, stats = blocker.args
    assert reason in ("cancelled", "eos", "context_full")
    assert stats["generated_tokens"] < 8000


def test_load_error_is_shown(qtbot, tmp_path):
    win = MainWindow(str(tmp_path / "missing-model"))
    qtbot.addWidget(win)
    qtbot.waitUntil(lambda: not win.error_label.isHidden(), timeout=30000)
    assert "does not exist" in win.error_label.text()
    assert not win.send_button.isEnabled()
    win.close()
