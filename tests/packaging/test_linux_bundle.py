"""The packaged app (PyInstaller, packaging/pyinstaller/flashchat.spec): built from this tree,
started with an empty data folder on a real (virtual) screen, it answers one question with the
real demo model, stores the conversation and quits; it never writes next to itself."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "packaging" / "pyinstaller" / "flashchat.spec"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux bundle"),
]


def _snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


def test_bundle_answers_and_stores_the_conversation(qwen_dir: Path, tmp_path: Path) -> None:
    """With the demo model: Qwen2.5's chat template makes mlx-lm import a tool parser by name,
    which a bundle lacked while the test asked SmolLM2."""
    dist, work = tmp_path / "dist", tmp_path / "build"
    build = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN"]
    build += ["--distpath", str(dist), "--workpath", str(work), str(SPEC)]
    subprocess.run(build, cwd=ROOT, check=True, timeout=1200)
    bundle = dist / "FlashChat"
    executable = bundle / "flashchat"
    assert executable.is_file()
    version = subprocess.run([executable, "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("FlashChat ")

    before = _snapshot(bundle)
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    env |= {"FLASHCHAT_HOME": str(home), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    command = [
        str(executable),
        "--model",
        str(qwen_dir),
        "--ask",
        "What is the capital of France?",
    ]
    if shutil.which("xvfb-run"):
        command = ["xvfb-run", "-a", "-s", "-screen 0 1280x800x24", *command]
    else:
        env["QT_QPA_PLATFORM"] = "offscreen"
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "The capital of France is Paris."
    with sqlite3.connect(home / "flashchat.sqlite3") as db:
        rows = db.execute("SELECT role, content FROM messages ORDER BY id").fetchall()
    assert rows == [
        ("user", "What is the capital of France?"),
        ("assistant", "The capital of France is Paris."),
    ]
    assert _snapshot(bundle) == before  # nothing written next to itself
