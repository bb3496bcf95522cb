"""A first run with nothing installed: the window explains and offers the demo model or a file;
the model installed from a file is loaded. The version is the one of pyproject.toml."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from app import first_run
from app.main_window import MainWindow
from engine_mlx.version import version

ROOT = Path(__file__).resolve().parents[2]


def test_empty_library_shows_what_to_do_and_loads_what_is_installed(
    qtbot, tmp_path, monkeypatch, tiny_model_dir
):
    monkeypatch.setattr(first_run, "has_any_model", lambda: False)
    monkeypatch.setattr("app.main_window.has_any_model", lambda: False)
    win = MainWindow(db_path=tmp_path / "chats.sqlite3")
    qtbot.addWidget(win)
    win.show()
    panel = win.first_run
    assert panel is not None and panel.isVisible() and not win.chat.isVisible()
    assert win.model_bar.status.text() == "No model installed"
    assert not win.send_button.isEnabled()
    with qtbot.waitSignal(win.worker.model_loaded, timeout=60000):
        panel.file_chosen.emit(str(tiny_model_dir("llama")))  # as the file dialog does
    qtbot.waitUntil(win.send_button.isEnabled, timeout=10000)
    assert win.first_run is None and win.chat.isVisible()
    win.close()


def test_on_a_mac_it_names_the_unified_memory_and_offers_a_model_that_fits(qtbot, monkeypatch):
    """The demo is sized for a CPU: a 16 GB Mac is offered Qwen3-8B in 4 bits, with its sizes
    and its DFlash2 drafter named; an 8 GB one keeps the demo; off a Mac nothing is said."""
    plain = first_run.NoModelPanel()
    qtbot.addWidget(plain)
    assert plain.mac_text.text() == "" and plain.mac_button is None  # this Linux machine
    monkeypatch.setattr(first_run, "unified_memory", lambda: True)
    monkeypatch.setattr(first_run, "physical_memory", lambda: 16 * 1000**3)
    monkeypatch.setattr(first_run, "usable_memory", lambda: 12 * 1000**3)
    panel = first_run.NoModelPanel()
    qtbot.addWidget(panel)
    text = panel.mac_text.text()
    assert "This Mac has 16.0 GB of unified memory; its GPU can use about 12.0 GB" in text
    assert "Qwen3-8B (4-bit), mlx-community/Qwen3-8B-4bit, 4.6 GB to download and about" in text
    assert "z-lab/Qwen3-8B-DFlash-b16" in text
    assert panel.mac_button is not None and panel.mac_button.text() == "Download Qwen3-8B (4-bit)"
    with qtbot.waitSignal(panel.download_requested) as asked:
        panel.mac_button.click()
    assert asked.args == ["mlx-community/Qwen3-8B-4bit"]
    monkeypatch.setattr(first_run, "physical_memory", lambda: 8 * 1000**3)
    monkeypatch.setattr(first_run, "usable_memory", lambda: 5 * 1000**3)
    small = first_run.NoModelPanel()
    qtbot.addWidget(small)
    assert small.mac_text.text().endswith("The demo model suits it.") and small.mac_button is None


def test_one_version_everywhere(qtbot, make_window, capsys):
    """``--version`` of both commands (their ``main``, as ``python -m`` runs it) and About."""
    from app.__main__ import main as app_main
    from engine_mlx.cli import main as engine_main

    text = (ROOT / "pyproject.toml").read_text()
    expected = re.search(r'^version = "([^"]+)"', text, re.MULTILINE).group(1)
    assert version() == expected
    for main in (app_main, engine_main):
        with pytest.raises(SystemExit) as exited:
            main(["--version"])
        assert exited.value.code == 0
        assert capsys.readouterr().out.strip() == f"FlashChat {expected}"
    win = make_window()
    assert f"FlashChat {expected}" in win.about_text()


@pytest.mark.slow  # the app in a process of its own
def test_ask_answers_greedily_stores_the_conversation_and_quits(tmp_path, tiny_model_dir):
    """``python -m app --ask``: the smoke test a bundle is checked with."""
    import os
    import sqlite3

    env = {**os.environ, "FLASHCHAT_HOME": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"}
    command = [sys.executable, "-m", "app", "--model", str(tiny_model_dir("llama"))]
    out = subprocess.run(
        [*command, "--ask", "Hello there"], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    reply = out.stdout.strip()
    assert reply
    with sqlite3.connect(tmp_path / "flashchat.sqlite3") as db:
        rows = db.execute("SELECT role, content FROM messages ORDER BY id").fetchall()
        temperature = db.execute("SELECT value FROM settings WHERE key = 'temperature'").fetchone()
    assert rows[0] == ("user", "Hello there") and rows[1][0] == "assistant"
    assert rows[1][1].strip() == reply
    assert temperature is None or float(temperature[0]) != 0.0  # the override was not saved


@pytest.mark.slow  # the app in a process of its own
def test_ask_with_a_model_that_will_not_load_says_why_and_exits_1(tmp_path):
    """A bundle missing a module, or a broken model folder: one line naming the model, status 1,
    the threads stopped first (not an abort)."""
    import os

    broken = tmp_path / "Broken-Model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama"}')
    env = {**os.environ, "FLASHCHAT_HOME": str(tmp_path / "home"), "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run(
        [sys.executable, "-m", "app", "--model", str(broken), "--ask", "Hello"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    assert "error: " in out.stderr and "Broken-Model" in out.stderr
    assert "QThread: Destroyed" not in out.stderr and out.stdout == ""
