"""Drops and pastes on the main window start the right install, run on the library worker's
thread, and the new model shows up in the library and the model bar."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QWidget

from app.main_window import MainWindow
from engine_mlx.library.sources import GGUFSource, HubSource, LocalFolder, SafetensorsFiles


@pytest.fixture
def window(qtbot, tiny_model_dir, hub, tmp_path, monkeypatch) -> MainWindow:
    monkeypatch.setenv("FLASHCHAT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_TOKEN", "")
    win = MainWindow(str(tiny_model_dir("qwen3")), db_path=tmp_path / "chats.sqlite3")
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()


def _mime(*, urls: list[QUrl] = (), text: str = "") -> QMimeData:
    mime = QMimeData()
    if urls:
        mime.setUrls(list(urls))
    if text:
        mime.setText(text)
    return mime


def _drag_and_drop(target: QWidget, mime: QMimeData) -> tuple[bool, bool]:
    """(drag accepted, drop accepted) for a drag entering ``target`` and dropping there."""
    pos = target.rect().center()
    buttons, modifiers = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(pos, Qt.DropAction.CopyAction, mime, buttons, modifiers)
    QApplication.sendEvent(target, enter)
    if not enter.isAccepted():
        return False, False
    drop = QDropEvent(QPointF(pos), Qt.DropAction.CopyAction, mime, buttons, modifiers)
    QApplication.sendEvent(target, drop)
    return True, drop.isAccepted()


def _drop_and_install(qtbot, win: MainWindow, mime: QMimeData, target: QWidget | None = None):
    """Drop ``mime``; wait for the install to end; return (source, installed folder)."""
    jobs_before = set(win.library_view.jobs)
    assert _drag_and_drop(target or win, mime) == (True, True)
    (job,) = set(win.library_view.jobs) - jobs_before
    row = win.library_view.row(job)
    qtbot.waitUntil(lambda: row.bar.format() in ("Installed", "Failed", "Stopped"), timeout=30000)
    assert row.bar.format() == "Installed", row.status.text()
    path = Path(row.status.text().removeprefix("Installed in "))
    return win.library_view.jobs[job][1], path


def _bar_models(win: MainWindow) -> list[str]:
    box = win.model_bar.target_box
    return [box.itemText(i) for i in range(box.count())]


def test_dropped_hub_link_downloads_the_model(qtbot, window: MainWindow, hub, publish) -> None:
    repo = publish("org/tiny-chat")
    url = QUrl(f"{hub.endpoint}/org/tiny-chat")  # as a browser drags it: a URL and its text
    source, path = _drop_and_install(qtbot, window, _mime(urls=[url], text=url.toString()))
    assert source == HubSource("org/tiny-chat")
    assert (path / "model.safetensors").read_bytes() == repo.files["model.safetensors"]
    assert window.library_view.isVisible()
    assert "tiny-chat" in [m.name for m in window.library_view.models]
    assert "tiny-chat" in _bar_models(window)
    assert window.library_worker.job_thread_id not in (None, threading.get_ident())


def test_dropped_text_names_a_drafter(qtbot, window: MainWindow, hub, companions) -> None:
    from tests.support.hub_server import repo_from_folder

    hub.add(repo_from_folder("org/tiny-dflash", companions["drafter"]))
    source, path = _drop_and_install(qtbot, window, _mime(text="org/tiny-dflash"))
    assert source == HubSource("org/tiny-dflash")
    assert path.name == "tiny-dflash"


def test_dropped_folder_gguf_and_mtp_file(
    qtbot, window: MainWindow, tiny_model_dir, tiny_gguf, companions, tmp_path
) -> None:
    folder = shutil.copytree(tiny_model_dir("llama"), tmp_path / "My-Llama")
    source, path = _drop_and_install(qtbot, window, _mime(urls=[QUrl.fromLocalFile(str(folder))]))
    assert source == LocalFolder(folder) and path.name == "My-Llama"
    source, path = _drop_and_install(
        qtbot, window, _mime(urls=[QUrl.fromLocalFile(str(tiny_gguf))])
    )
    assert source == GGUFSource(tiny_gguf) and path.name == "Tiny-Llama.Q8_0"
    assert (path / "model.safetensors").is_file() or list(path.glob("model*.safetensors"))
    source, path = _drop_and_install(
        qtbot, window, _mime(urls=[QUrl.fromLocalFile(str(companions["mtp"]))])
    )
    assert source == SafetensorsFiles((companions["mtp"],))
    kinds = {m.name: m.kind for m in window.library_view.models}
    assert kinds == {"My-Llama": "target", "Tiny-Llama.Q8_0": "target", "tiny-mtp": "mtp"}
    assert {"My-Llama", "Tiny-Llama.Q8_0"} <= set(_bar_models(window))


def test_links_dropped_on_the_prompt_add_models_text_is_typed(
    qtbot, window: MainWindow, hub, publish
) -> None:
    publish("org/tiny-chat")
    viewport = window.prompt_edit.viewport()
    url = QUrl(f"{hub.endpoint}/org/tiny-chat")
    source, _ = _drop_and_install(qtbot, window, _mime(urls=[url]), target=viewport)
    assert source == HubSource("org/tiny-chat")
    assert window.prompt_edit.toPlainText() == ""
    jobs = len(window.library_view.jobs)
    _drag_and_drop(viewport, _mime(text="Qwen/Qwen3-4B is my favourite"))
    assert len(window.library_view.jobs) == jobs  # plain text is the prompt's


def test_drops_that_name_no_model(qtbot, window: MainWindow, tmp_path: Path) -> None:
    assert _drag_and_drop(window, _mime(text="what is the capital of France?")) == (False, False)
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    accepted = _drag_and_drop(window, _mime(urls=[QUrl.fromLocalFile(str(notes))]))
    assert accepted == (True, False)  # taken, then refused with a reason
    assert window.library_view.error.isVisible()
    assert "none of those" in window.library_view.error.text()
    assert window.library_view.jobs == {}


def test_paste_outside_the_prompt_adds_a_model(qtbot, window: MainWindow, publish) -> None:
    publish("org/tiny-chat")
    QGuiApplication.clipboard().setText("org/tiny-chat")
    window.activateWindow()
    window.chat.browser.setFocus()
    with qtbot.waitSignal(window.library_worker.installed, timeout=30000) as done:
        QTest.keyClick(window.chat.browser, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert Path(done.args[1]).name == "tiny-chat"
    # In the prompt, Ctrl+V pastes the text as usual and starts nothing.
    jobs = len(window.library_view.jobs)
    window.prompt_edit.setFocus()
    QTest.keyClick(window.prompt_edit, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert window.prompt_edit.toPlainText() == "org/tiny-chat"
    assert len(window.library_view.jobs) == jobs
