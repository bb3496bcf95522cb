"""``python -m engine_mlx pull`` and ``list``, as a person runs them, against the local hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_mlx.cli import main
from tests.support.hub_server import repo_from_folder

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def home(tmp_path: Path, hub, monkeypatch: pytest.MonkeyPatch) -> Path:
    """FlashChat's data folder and hub for in-process runs of ``main``."""
    monkeypatch.setenv("FLASHCHAT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_TOKEN", "")
    return tmp_path / "home"


@pytest.mark.slow  # a process of its own
def test_pull_command_streams_json_events(hub, publish, home: Path) -> None:
    """The real command in its own process: HF_ENDPOINT picked up, events on stdout."""
    repo = publish("org/tiny-chat")
    repo.branches["v2"] = repo.commit
    proc = subprocess.run(
        [sys.executable, "-m", "engine_mlx", "pull", "org/tiny-chat", "--revision", "v2", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["event"] == "plan" and events[0]["commit"] == repo.commit
    assert events[-1] == {"event": "installed", "path": str(home / "models" / "tiny-chat")}
    progress = [e for e in events if e["event"] == "progress"]
    assert progress[-1]["done"] == progress[-1]["total"] == events[0]["download_bytes"]


def test_pull_a_link_then_list(hub, publish, companions, home: Path, capsys) -> None:
    publish("org/tiny-chat")
    hub.add(repo_from_folder("org/tiny-chat-dflash", companions["drafter"]))
    assert main(["pull", "org/tiny-chat"]) == 0
    assert main(["pull", f"{hub.endpoint}/org/tiny-chat-dflash/tree/main"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        str(home / "models" / "tiny-chat"),
        str(home / "models" / "tiny-chat-dflash"),
    ]
    assert "org/tiny-chat-dflash (DFlash drafter" in err and "installed" in err

    assert main(["list", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [(m["name"], m["kind"]) for m in listing["models"]] == [
        ("tiny-chat", "target"),
        ("tiny-chat-dflash", "drafter"),
    ]
    assert listing["pairings"] == [
        {
            "target": "tiny-chat",
            "companion": "tiny-chat-dflash",
            "kind": "drafter",
            "fits": True,
            "reason": "",
        }
    ]
    assert main(["list"]) == 0
    assert "tiny-chat <- drafter tiny-chat-dflash: fits" in capsys.readouterr().out


def test_pull_errors_are_one_line_and_exit_2(hub, home: Path, capsys) -> None:
    assert main(["pull", "org/missing"]) == 2
    assert capsys.readouterr().err.startswith("error: No model org/missing on 127.0.0.1")
    assert main(["pull", "not a model"]) == 2
    assert "not a model FlashChat can add" in capsys.readouterr().err
    assert main(["pull", "./nowhere", "--revision", "v1"]) == 2
    assert "does not exist" in capsys.readouterr().err
