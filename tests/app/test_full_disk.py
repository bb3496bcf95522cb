"""A full disk under the history, on a real file system that fills up (a 1 MB tmpfs; mounting
needs root, as CI has, so these skip without it): it is called full, with where and how much
room is needed, never a damaged history to move aside; ``--ask`` says so and exits 1 rather
than hanging or claiming success."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from app.storage import ConversationStore, StorageError

NOT_DAMAGE = ("move or rename", "damaged", "not a SQLite database")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A folder on a 1 MB tmpfs of its own."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Write a file until the disk is full (bounded: the disk is 1 MB)."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for _ in range(1024):
            os.write(fd, b"x" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    assert shutil.disk_usage(folder).free < 4096
    return filler


def assert_full_not_damaged(error: StorageError, folder: Path) -> None:
    message = str(error)
    assert "full" in message and str(folder) in message and "MB free there" in message
    assert not any(words in message for words in NOT_DAMAGE), message
    assert not error.file_unusable


def test_a_full_disk_is_called_full_and_the_history_survives(small_disk: Path) -> None:
    db = small_disk / "history.sqlite3"
    with ConversationStore(db) as store:
        conv = store.create_conversation("Kept")
        store.add_message(conv.id, "user", "written before the disk filled")
        filler = fill(small_disk)
        with pytest.raises(StorageError) as writing:
            store.add_message(conv.id, "user", "x" * 200_000)
        assert_full_not_damaged(writing.value, small_disk)
    with pytest.raises(StorageError) as opening:  # opening needs room for its journal too
        ConversationStore(db).close()
    assert_full_not_damaged(opening.value, small_disk)
    filler.unlink()
    with ConversationStore(db) as store:  # room again: nothing was lost, writes work
        (kept,) = store.list_conversations()
        assert [m.content for m in store.messages(kept.id)] == ["written before the disk filled"]
        store.add_message(kept.id, "assistant", "and after")


def test_the_window_on_a_full_disk_offers_no_move_aside(qtbot, make_window, small_disk) -> None:
    db = small_disk / "history.sqlite3"
    ConversationStore(db).close()
    fill(small_disk)
    win = make_window(db=db)
    assert win.storage_banner.isVisible() and "full" in win.storage_label.text()
    assert "not saved" in win.storage_label.text()
    assert not win.storage_fresh_button.isVisible()  # the file is fine: keep it where it is


@pytest.mark.parametrize("when", ["before the question", "mid-reply"])
def test_ask_on_a_disk_that_fills_says_so_and_exits_1(
    qtbot, make_window, tiny_model_dir, small_disk, capsys, monkeypatch, when
) -> None:
    """Before: the question cannot be stored, so no reply will come (this hung forever).
    Mid-reply: the reply is printed, then that it was not saved (this said nothing)."""
    exits: list[int] = []
    monkeypatch.setattr(QApplication, "exit", lambda code=0: exits.append(code))
    win = make_window(model=str(tiny_model_dir("qwen3")), db=small_disk / "history.sqlite3")
    signal = win.worker.model_loaded if when == "before the question" else win.worker.started
    signal.connect(lambda _event: fill(small_disk))  # on the worker's thread, before the window
    win.ask_and_quit("Hello there")
    qtbot.waitUntil(lambda: bool(exits), timeout=60000)
    out, err = capsys.readouterr()
    assert exits == [1]
    assert "full" in err and str(small_disk) in err
    if when == "mid-reply":
        assert out.strip() and "the reply was not saved" in err
    else:
        assert out == ""


@pytest.mark.slow  # the app in a process of its own
def test_ask_with_the_disk_full_at_start_prints_the_reply_and_exits_1(
    tiny_model_dir, small_disk
) -> None:
    fill(small_disk)
    env = {**os.environ, "FLASHCHAT_HOME": str(small_disk), "QT_QPA_PLATFORM": "offscreen"}
    command = [sys.executable, "-m", "app", "--model", str(tiny_model_dir("llama"))]
    out = subprocess.run(
        [*command, "--ask", "Hello there"], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 1, out.stderr
    assert out.stdout.strip()  # the reply
    assert "the reply was not saved" in out.stderr and "full" in out.stderr
    assert "QThread: Destroyed" not in out.stderr
