"""The library window with its real worker thread: listing and pairing, suggestions, removal
with confirmation, cancel and resume of a download, unfinished downloads found on disk."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QThread, QTimer
from PySide6.QtWidgets import QMessageBox, QPushButton

from app.download_worker import LibraryWorker
from app.widgets.library_view import LibraryView
from engine_mlx.library.download import DownloadOptions, pull
from engine_mlx.library.progress import OperationCancelled
from engine_mlx.library.sources import HubSource


@pytest.fixture
def library(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    root.mkdir()
    return root


@pytest.fixture
def view(qtbot, library: Path, hub):
    thread = QThread()
    options = DownloadOptions(endpoint=hub.endpoint, token=False, retry_wait_s=0.01)
    worker = LibraryWorker(library, options)
    worker.moveToThread(thread)
    thread.start()
    widget = LibraryView(worker)
    qtbot.addWidget(widget)
    widget.show()
    yield widget
    worker.cancel_all()
    thread.quit()
    thread.wait(10000)


def _wait_done(qtbot, view: LibraryView, job: str) -> str:
    row = view.row(job)
    qtbot.waitUntil(lambda: row.bar.format() in ("Installed", "Failed", "Stopped"), timeout=30000)
    return row.bar.format()


def test_lists_models_with_pairing_reasons(qtbot, view, library, tiny_model_dir, companions):
    shutil.copytree(tiny_model_dir("qwen3"), library / "tiny-qwen3")
    shutil.copytree(companions["drafter"], library / "tiny-dflash")
    shutil.copytree(companions["other_vocab"], library / "big-vocab-dflash")
    view.refresh()
    names = [view.table.item(r, 0).text() for r in range(view.table.rowCount())]
    assert names == ["big-vocab-dflash", "tiny-dflash", "tiny-qwen3"]
    assert view.table.item(2, 1).text() == "model" and view.table.item(2, 5).text() == "512"
    assert view.pairing_text("tiny-qwen3") == (
        "drafter tiny-dflash  ·  does not fit drafter big-vocab-dflash: drafter vocabulary "
        "1000, target 320"
    )
    assert view.pairing_text("tiny-dflash") == "tiny-qwen3"
    assert view.pairing_text("big-vocab-dflash") == (
        "–  ·  does not fit tiny-qwen3: drafter vocabulary 1000, target 320"
    )
    # "Load in chat" picks the drafter that fits.
    view.select("tiny-qwen3")
    with qtbot.waitSignal(view.load_requested) as loaded:
        view.load_button.click()
    assert loaded.args == [str(library / "tiny-qwen3"), str(library / "tiny-dflash")]


def test_suggested_drafter_button_starts_its_download(qtbot, view, library, tiny_model_dir):
    """A Qwen3-4B-shaped target gets z-lab's drafter suggested; the button starts that
    download (the local hub does not have it, so it fails with the hub's answer)."""
    folder = shutil.copytree(tiny_model_dir("qwen3"), library / "Qwen3-4B")
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_size=2560, num_hidden_layers=36, vocab_size=151936)
    (folder / "config.json").write_text(json.dumps(config))
    view.refresh()
    assert view.suggestions_box.isVisible()
    button = next(
        b
        for b in view.suggestions_box.findChildren(QPushButton)
        if b.accessibleName() == "Download z-lab/Qwen3-4B-DFlash-b16"
    )
    button.click()
    (job,) = view.jobs
    assert view.jobs[job][1] == HubSource("z-lab/Qwen3-4B-DFlash-b16")
    assert not view.suggestions_box.isVisible()  # it is on its way
    assert _wait_done(qtbot, view, job) == "Failed"
    assert "No model z-lab/Qwen3-4B-DFlash-b16 on 127.0.0.1" in view.row(job).status.text()


def test_remove_asks_first(qtbot, view, library, tiny_model_dir):
    shutil.copytree(tiny_model_dir("qwen2"), library / "tiny-qwen2")
    view.refresh()
    view.select("tiny-qwen2")

    def answer(button: QMessageBox.StandardButton) -> None:
        box = view.confirm_box
        assert "Delete tiny-qwen2" in box.text()
        box.button(button).click()

    QTimer.singleShot(0, lambda: answer(QMessageBox.StandardButton.Cancel))
    view.remove_button.click()
    assert (library / "tiny-qwen2").is_dir()
    with qtbot.waitSignal(view.library_changed):
        QTimer.singleShot(0, lambda: answer(QMessageBox.StandardButton.Yes))
        view.remove_button.click()
    assert not (library / "tiny-qwen2").exists() and view.table.rowCount() == 0


def test_cancel_then_resume_a_download(qtbot, view, hub, publish):
    repo = publish("org/tiny")
    size = len(repo.files["model.safetensors"])
    hub.throttle_bps = 100_000  # slow enough to be caught mid-file
    job = view.start(HubSource("org/tiny"))
    row = view.row(job)
    qtbot.waitUntil(lambda: "left" in row.status.text(), timeout=20000)  # speed measured
    assert "Downloading model.safetensors (2 of 4)" in row.detail.text()
    assert "/s" in row.status.text() and " of 540 kB" in row.status.text()
    row.cancel_button.click()
    assert _wait_done(qtbot, view, job) == "Stopped"
    assert "cancelled" in row.status.text() and row.resume_button.isVisible()
    assert view.worker.job_thread_id not in (None, threading.get_ident())

    hub.throttle_bps = 0
    mark = hub.mark()
    row.resume_button.click()
    assert _wait_done(qtbot, view, row.job) == "Installed"
    (rng,) = hub.file_requests("model.safetensors", since=mark)
    kept = int(rng.removeprefix("bytes=").removesuffix("-"))
    assert 0 < kept < size
    assert hub.served("model.safetensors", since=mark) == size - kept
    assert [m.name for m in view.models] == ["tiny"]
    row.dismiss_button.click()  # the finished line goes, the model stays
    assert view.jobs == {} and not view.downloads_box.isVisible()
    assert [m.name for m in view.models] == ["tiny"]


def test_unfinished_download_on_disk_can_be_resumed_or_discarded(
    qtbot, view, library, hub, publish
):
    publish("org/tiny")
    publish("org/other", arch="llama")
    options = DownloadOptions(endpoint=hub.endpoint, token=False)
    for repo in ("org/tiny", "org/other"):  # as a previous session left them
        cancel = threading.Event()
        with pytest.raises(OperationCancelled):
            pull(
                HubSource(repo),
                library,
                cancel=cancel,
                options=options,
                progress=lambda p, c=cancel: p.files_done >= 2 and c.set(),
            )
    view.refresh()
    rows = {view.jobs[j][1].repo_id: view.row(j) for j in view.jobs}
    assert set(rows) == {"org/tiny", "org/other"}
    assert "Unfinished" in rows["org/tiny"].status.text()
    rows["org/other"].discard_button.click()
    assert not any((library / ".partial").glob("org--other@*"))
    rows["org/tiny"].resume_button.click()
    assert _wait_done(qtbot, view, rows["org/tiny"].job) == "Installed"
    assert [m.name for m in view.models] == ["tiny"]


def test_rows_grow_with_their_wrapped_text_when_the_dialog_narrows(qtbot, view):
    from PySide6.QtWidgets import QTableWidgetItem

    view.resize(1800, 500)
    view.table.setRowCount(1)
    long = "does not fit SmolLM2-135M-Instruct: drafter hidden size 64, target 576; " * 2
    view.table.setItem(0, view.table.columnCount() - 1, QTableWidgetItem(long))
    qtbot.waitUntil(lambda: view.table.rowHeight(0) > 0)
    wide = view.table.rowHeight(0)
    view.resize(view.minimumSizeHint().width(), 500)
    qtbot.waitUntil(lambda: view.table.rowHeight(0) > wide, timeout=3000)
