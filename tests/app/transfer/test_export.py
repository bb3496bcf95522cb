"""Exports hold everything the history holds: FlashChat JSON round-trips byte for byte, and
Markdown reads as the conversation with each reply's statistics and reasoning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.storage import ConversationStore
from app.transfer.errors import TransferError
from app.transfer.export import FORMAT, export_conversations, records, to_json, to_markdown
from app.transfer.importing import parse_import

STATS = {
    "prompt_tokens": 31,
    "generated_tokens": 64,
    "steps": 25,
    "tau": 2.56,
    "acceptance_rate": 0.43,
    "decode_tps": 14.25,
    "prefill_tps": 120.5,
    "ttft_s": 0.31,
    "modes": {"dflash2": 20, "ar": 5},
    "reason": "eos",
    "model": "Qwen2.5-Coder-0.5B-Instruct",
    "drafter": "Qwen2.5-Coder-0.5B-Instruct-DFlash2",
    "sampling": {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05},
}


@pytest.fixture
def filled(tmp_path: Path) -> ConversationStore:
    store = ConversationStore(tmp_path / "history.sqlite3")
    first = store.create_conversation("Reversing a list").id
    store.add_message(first, "system", "You are a helpful assistant.")
    store.add_message(first, "user", "How do I reverse a list?")
    store.add_message(
        first, "assistant", "Use `xs[::-1]`.", STATS, reasoning="Slicing is simplest."
    )
    second = store.create_conversation('Ünïcode ✓ and "quotes"').id
    store.add_message(second, "user", "Say hi in Japanese")
    store.add_message(second, "assistant", "こんにちは", {"tau": None, "reason": "max_tokens"})
    yield store
    store.close()


def test_json_exported_imported_and_exported_again_is_the_same_bytes(filled, tmp_path):
    out = tmp_path / "all.json"
    assert export_conversations(filled, out, "json") == 2
    first = out.read_bytes()
    document = json.loads(first)
    assert document["format"] == FORMAT and document["version"] == 1
    assert [c["title"] for c in document["conversations"]] == [
        'Ünïcode ✓ and "quotes"',
        "Reversing a list",
    ]
    again = ConversationStore(tmp_path / "other.sqlite3")
    imported = parse_import(first.decode(), now=0.0)
    again.add_conversations(imported.conversations)
    export_conversations(again, tmp_path / "again.json", "json")
    assert (tmp_path / "again.json").read_bytes() == first
    reply = again.messages(again.list_conversations()[1].id)[-1]
    assert reply.stats == STATS and reply.reasoning == "Slicing is simplest."
    again.close()


def test_markdown_shows_each_reply_with_its_statistics_and_folded_reasoning(filled):
    text = to_markdown(records(filled))
    assert text.index("# Ünïcode") < text.index("# Reversing a list")
    assert "## User\n\nHow do I reverse a list?" in text
    assert "<details><summary>Reasoning</summary>\n\nSlicing is simplest.\n\n</details>" in text
    assert (
        "*14.2 tok/s · τ 2.56 · 43% accepted · TTFT 310 ms · 64 tokens · DFlash2 20, Plain" in text
    )
    assert "*max tokens*" in text


def test_a_selection_exports_only_those_and_an_unknown_id_is_refused(filled, tmp_path):
    ids = [c.id for c in filled.list_conversations()]
    assert [c.title for c in records(filled, ids[1:])] == ["Reversing a list"]
    with pytest.raises(TransferError, match="There is no conversation 999"):
        export_conversations(filled, tmp_path / "x.json", "json", [999])
    assert not (tmp_path / "x.json").exists()


def test_a_file_that_cannot_be_written_leaves_nothing_behind(filled, tmp_path):
    folder = tmp_path / "missing"
    with pytest.raises(TransferError, match="Could not write"):
        export_conversations(filled, folder / "out.json", "json")
    assert not folder.exists()


def test_an_empty_history_exports_an_empty_list(tmp_path):
    with ConversationStore(tmp_path / "h.sqlite3") as store:
        assert json.loads(to_json(records(store)))["conversations"] == []
