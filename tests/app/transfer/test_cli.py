"""``python -m app export|import``: the app's history file, one line on a bad file, exit 2."""

from __future__ import annotations

import json

import pytest

from app.__main__ import main
from app.history_file import default_database_path
from app.storage import ConversationStore
from tests.app.transfer.chatgpt_export import chatgpt_export


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHCHAT_HOME", str(tmp_path / "home"))
    return tmp_path


def test_import_then_export_all_or_some(home, capsys):
    source = home / "conversations.json"
    source.write_text(json.dumps(chatgpt_export()))
    assert main(["import", str(source)]) == 0
    assert "Imported 2 conversations (6 messages)" in capsys.readouterr().out
    assert main(["export", "--out", str(home / "all.json")]) == 0
    exported = json.loads((home / "all.json").read_text())
    assert len(exported["conversations"]) == 2
    with ConversationStore(default_database_path()) as store:
        first = store.list_conversations()[-1].id
    assert main(["export", "--out", str(home / "one.md"), "--id", str(first)]) == 0
    assert (home / "one.md").read_text().startswith("# Reversing lists")


def test_a_bad_file_exits_2_with_one_line_and_imports_nothing(home, capsys):
    bad = home / "bad.json"
    bad.write_text("[1, 2")
    assert main(["import", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: This file is not JSON")
    with ConversationStore(default_database_path()) as store:
        assert store.list_conversations() == []
    assert main(["import", str(home / "missing.json")]) == 2
    assert "Could not read" in capsys.readouterr().err
    assert main(["export", "--out", str(home / "x.json"), "--id", "7"]) == 2
    assert "There is no conversation 7." in capsys.readouterr().err
