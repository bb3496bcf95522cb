"""The main window end to end: a real tiny model on the worker thread, a real SQLite file."""

from __future__ import annotations

import threading

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel

from app.main_window import MainWindow
from app.messages import LiveUpdate
from app.stream_pacer import CPU_SHARE
from app.widgets.rate_chart import BUSY_REPAINT_S
from engine_mlx.events import ModeSwitch, Started, Tokens
from engine_mlx.modes import Mode
from engine_mlx.stats import StepStats


def _send(qtbot, win: MainWindow, text: str, max_tokens: int = 24) -> tuple[str, dict, str]:
    from dataclasses import replace

    win.settings = replace(win.settings, max_tokens=max_tokens, temperature=0.0)
    win.prompt_edit.setPlainText(text)
    with qtbot.waitSignal(win.worker.finished, timeout=60000) as blocker:
        win.send_button.click()
    qtbot.waitUntil(lambda: not win.generating, timeout=5000)
    (finished,) = blocker.args
    return finished.reason, finished.stats.to_json(), finished.text


def test_send_streams_reply_with_stats(qtbot, make_window):
    win = make_window()
    streamed: list[str] = []
    win.worker.segments.connect(lambda update: streamed.extend(t for t, _ in update.segments))
    reason, stats, text = _send(qtbot, win, "Hello there")
    assert reason in ("eos", "max_tokens")
    assert "".join(streamed) == text
    assert stats["generated_tokens"] >= 1
    messages = win.store.messages(win.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].content == text and messages[1].stats["decode_tps"] == stats["decode_tps"]
    assert win.panel.mode_label.text() in ("Plain", "DFlash2", "Prompt lookup")
    assert win.conversations.list.count() == 1
    assert win.worker.generation_thread_id not in (None, threading.get_ident())


def test_stop_mid_reply(qtbot, make_window):
    win = make_window()
    first = []
    win.worker.segments.connect(lambda *_: first or (first.append(1), win.stop()))
    reason, stats, _text = _send(qtbot, win, "Tell me a long story", max_tokens=400)
    assert reason in ("cancelled", "eos")
    if reason == "cancelled":
        assert stats["generated_tokens"] < 400
    assert not win.stop_button.isEnabled() and win.send_button.isEnabled()


def test_regenerate_replaces_the_reply(qtbot, make_window):
    win = make_window()
    _send(qtbot, win, "Hi")
    reply = win.store.messages(win.conversation_id)[-1]
    with qtbot.waitSignal(win.worker.finished, timeout=60000):
        win.regenerate(reply.id)
    qtbot.waitUntil(lambda: not win.generating, timeout=5000)
    messages = win.store.messages(win.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[-1].id != reply.id
    assert messages[-1].content == reply.content  # greedy: the same reply again


def test_conversations_survive_a_restart(qtbot, make_window):
    win = make_window()
    _send(qtbot, win, "Remember this")
    conv_id = win.conversation_id
    texts = [m.content for m in win.store.messages(conv_id)]
    win.close()
    again = make_window()
    assert again.conversations.list.count() == 1
    again.conversations.select(conv_id)
    assert again.conversation_id == conv_id
    assert [m.content for m in again.store.messages(conv_id)] == texts
    assert "Remember this" in again.chat.message_text(again.store.messages(conv_id)[0].id)


def _step(mode: Mode, *, tps: float, depth: int, tau: float, acceptance: float) -> Tokens:
    stats = StepStats(mode, committed=2, drafted=3, tested=3, accepted=1)
    return Tokens("", (1, 2), (True, False), stats, tps, depth, tau=tau, acceptance_rate=acceptance)


def test_panel_follows_a_scripted_event_sequence(qtbot, make_window):
    """Worker signals as the engine would send them, including a mode switch and its reason."""
    win = make_window()
    win.generating = True
    win.chat.start_assistant()
    win.worker.started.emit(Started(Mode.DFLASH2, 120, 8192, "cpu"))
    win.worker.segments.emit(
        LiveUpdate(
            (("Hello ", True), ("world", False)),
            _step(Mode.DFLASH2, tps=21.5, depth=130, tau=3.2, acceptance=0.71),
        )
    )
    reason = "context 9,210 tokens: MTP measured 23.1 tok/s, DFlash2 17.4"
    win.worker.mode_switched.emit(ModeSwitch(Mode.DFLASH2, Mode.MTP, reason))
    win.worker.segments.emit(
        LiveUpdate((("!", False),), _step(Mode.MTP, tps=23.0, depth=140, tau=2.1, acceptance=0.6))
    )
    qtbot.waitUntil(lambda: not win.pacer.pending, timeout=2000)  # the paced flush
    assert win.panel.mode_label.text() == "MTP"
    assert win.panel.tau_label.text() == "2.10" and win.panel.acceptance_label.text() == "60%"
    assert any(reason in label.text() for label in win.panel.findChildren(QLabel))
    assert "Hello world!" in win.chat.streaming_text()
    assert "140" in win.context_meter.format()


def test_engine_error_shows_in_window(qtbot, make_window, tmp_path):
    win = make_window(str(tmp_path / "no-such-model"))
    qtbot.waitUntil(lambda: not win.error_label.isHidden(), timeout=30000)
    assert "does not exist" in win.error_label.text()
    assert not win.send_button.isEnabled()


def test_gui_thread_stays_responsive_while_generating(qtbot, make_window):
    win = make_window()
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(1) if win.generating else None)
    timer.start(5)
    _send(qtbot, win, "Count to ten", max_tokens=60)
    timer.stop()
    assert len(ticks) >= 3  # the GUI event loop ran while the worker generated


def test_settings_persist_and_apply(qtbot, make_window, monkeypatch):
    from app.settings_dialog import SettingsDialog

    win = make_window()
    dialog = SettingsDialog(win.settings, win)
    dialog.temperature.setValue(1.3)
    dialog.max_tokens.setValue(77)
    dialog.colour_draft.setChecked(True)
    chosen = dialog.result_settings()
    monkeypatch.setattr(SettingsDialog, "exec", lambda self: True)
    monkeypatch.setattr(SettingsDialog, "result_settings", lambda self: chosen)
    win.open_settings()
    assert win.chat._colour_draft is True
    win.close()
    again = make_window()
    assert (again.settings.temperature, again.settings.max_tokens) == (1.3, 77)
    assert again.settings.colour_draft_tokens is True


def test_status_bar_names_the_blas_and_its_reason(qtbot, make_window):
    from engine_mlx.blas import status

    win = make_window()
    # (a model not timed on this machine yet says so first; then the backend is shown)
    qtbot.waitUntil(lambda: win.statusBar().currentMessage().startswith("MLX "), timeout=30000)
    message = win.statusBar().currentMessage()
    assert message.startswith("MLX ") and "CPU" in message
    assert status().summary() in message
    assert status().reason in win.statusBar().toolTip()
    # The engine decodes on this CPU: the stream keeps to its share of the GUI thread.
    assert win._loaded is not None and win._loaded.decodes_on_cpu
    assert win.pacer.share == CPU_SHARE
    assert win.panel.chart.repaint_timer.interval() == round(BUSY_REPAINT_S * 1000)


def test_measuring_step_costs_is_said_in_the_status_bar(
    qtbot, tiny_model_dir, tmp_path, monkeypatch
):
    """A model this machine has not timed yet: the window says so while auto mode's step
    costs are measured, then shows the backend again."""
    monkeypatch.setenv("FLASHCHAT_STEP_COSTS", str(tmp_path / "step-costs"))  # none timed yet
    notices: list[str] = []
    shown = MainWindow._on_notice

    def record(self, text: str) -> None:
        notices.append(text)
        shown(self, text)

    monkeypatch.setattr(MainWindow, "_on_notice", record)  # before the worker starts
    win = MainWindow(str(tiny_model_dir("llama")), "", db_path=tmp_path / "chats.sqlite3")
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: len(notices) == 2, timeout=30000)
    assert notices[0].startswith("Measuring how fast") and notices[1] == ""
    assert win.statusBar().currentMessage().startswith("MLX ")
    win.close()
