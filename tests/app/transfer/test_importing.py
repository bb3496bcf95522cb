"""Imports: the three formats are read as a person expects, a bad file gets a message that
says what and where, and any input at all ends in a correct import or a TransferError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.storage import ROLES, ConversationStore, MessageRecord
from app.transfer.errors import TransferError
from app.transfer.export import to_json
from app.transfer.importing import parse_import, read_import
from tests.app.transfer.chatgpt_export import chatgpt_export

NOW = 1_750_000_000.0


def test_a_chatgpt_export_keeps_the_branch_shown_and_the_text_of_every_turn():
    imported = parse_import(json.dumps(chatgpt_export()), NOW)
    assert imported.source == "ChatGPT export"
    first, second = imported.conversations
    assert first.title == "Reversing lists"
    assert [(m.role, m.content) for m in first.messages] == [
        ("user", "How do I reverse a list in Python?"),
        ("assistant", "Use `xs[::-1]` or `xs.reverse()`."),
        ("user", "What is in this screenshot?"),
        ("assistant", "It shows a Python function that does nothing."),
    ]
    assert first.messages[-1].reasoning == "The image shows a stub function."
    assert first.messages[0].created_at == 1700000000.5
    assert (first.created_at, first.updated_at) == (1700000000.0, 1700000024.0)
    assert second.title == "Compute 2**10"  # no title: the first question
    assert [m.content for m in second.messages] == ["Compute 2**10", "2**10 is 1024."]
    assert imported.skipped == 3  # the tool result, the image, the code run
    assert "Left out 3 items" in imported.summary("conversations.json")


def test_openai_message_lists_in_every_shape():
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image_url"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
        {"role": "tool", "content": "42", "tool_call_id": "1"},
        {"role": "assistant", "content": "Hello!"},
    ]
    plain = parse_import(json.dumps(messages), NOW)
    (conv,) = plain.conversations
    assert [(m.role, m.content) for m in conv.messages] == [
        ("system", "Be brief."),
        ("user", "Hi"),
        ("assistant", "Hello!"),
    ]
    assert conv.title == "Hi" and plain.skipped == 3 and plain.source == "OpenAI messages"
    wrapped = parse_import(json.dumps({"messages": messages}), NOW)
    assert wrapped.conversations == plain.conversations
    lines = "\n".join(json.dumps({"messages": messages}) for _ in range(3))
    assert len(parse_import(lines, NOW).conversations) == 3


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "not JSON"),
        ("{oops", "not JSON \\(line 1, column 2"),
        ('{"a": 1}\n{"b": ', "Line 2 is not JSON"),
        ("[]", "holds no conversations"),
        ("42", "not a conversation export"),
        ('[{"x": 1}]', "but not of chat messages"),
        ('[{"role": "robot", "content": "hi"}]', "message 1: the role 'robot'"),
        ('[{"role": "tool", "content": "hi"}]', "has no text messages"),
        ('{"format": "other", "version": 1}', "not FlashChat's"),
        ('{"format": "flashchat.conversations", "version": 9}', "newer FlashChat"),
        (
            '{"format": "flashchat.conversations", "version": 1, "conversations": '
            '[{"title": "t", "created_at": 1, "updated_at": 1, "messages": [{"role": "user"}]}]}',
            "Conversation 1, message 1: 'content' is missing",
        ),
        (
            '{"format": "flashchat.conversations", "version": 1, "conversations": '
            '[{"title": "t", "created_at": -5, "updated_at": 1, "messages": []}]}',
            "Conversation 1: 'created_at' must be a time",
        ),
        ('[{"mapping": {}, "current_node": "n"}]', "'current_node' does not name"),
        (
            '[{"mapping": {"a": {"parent": "b"}, "b": {"parent": "a"}}, "current_node": "a"}]',
            "loops back on itself",
        ),
    ],
)
def test_a_bad_file_gets_a_message_saying_what_and_where(text, says):
    with pytest.raises(TransferError, match=says):
        parse_import(text, NOW)


def test_a_file_that_is_not_utf8_is_refused_by_name(tmp_path):
    path = tmp_path / "chats.json"
    path.write_bytes(b'[{"role": "user", "content": "\xff"}]')
    with pytest.raises(TransferError, match=r"chats\.json is not UTF-8 text"):
        read_import(path, NOW)


def test_an_import_is_one_transaction(tmp_path):
    """The second conversation fails while it is written: the first is not kept either."""
    store = ConversationStore(tmp_path / "h.sqlite3")
    good = parse_import(json.dumps(chatgpt_export()), NOW).conversations
    broken = good[1].__class__(
        "broken", NOW, NOW, (MessageRecord("user", "hi", NOW, {"not json": {1, 2}}),)
    )
    with pytest.raises(TypeError):
        store.add_conversations([good[0], broken])
    assert store.list_conversations() == []
    store.close()


# --- any input at all -------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(
    [
        "role", "content", "messages", "mapping", "current_node", "parent", "children", "message",
        "author", "parts", "content_type", "format", "version", "conversations", "title",
        "created_at", "updated_at", "stats", "reasoning", "create_time", "type", "text",
        "thoughts", "metadata",
    ]
)  # fmt: skip
VALUES = JSON | st.sampled_from([*ROLES, "tool", "thoughts", "text", "flashchat.conversations", 1])


def _valid_documents() -> list:
    flashchat = json.loads(to_json(parse_import(json.dumps(chatgpt_export()), NOW).conversations))
    openai = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    return [flashchat, chatgpt_export(), openai, {"messages": openai}]


@st.composite
def mutated(draw):
    """A valid document of one of the formats with one value somewhere replaced, or a key
    added or removed: the damage a real file shows."""
    document = draw(st.sampled_from(_valid_documents()))
    node = document
    for _ in range(draw(st.integers(0, 8))):
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        children = [(k, v) for k, v in children if isinstance(v, dict | list) and v]
        if not children:
            break
        _, node = draw(st.sampled_from(children))
    action = draw(st.sampled_from(["replace", "add", "remove"]))
    if isinstance(node, dict) and node:
        key = draw(st.sampled_from(sorted(node)))
        if action == "remove":
            del node[key]
        else:
            node[key if action == "replace" else draw(KEYS)] = draw(VALUES)
    elif isinstance(node, list) and node:
        index = draw(st.integers(0, len(node) - 1))
        if action == "remove":
            del node[index]
        else:
            node[index] = draw(VALUES)
    return document


def _imports_correctly_or_says_why(text: str, tmp_path: Path) -> None:
    try:
        imported = parse_import(text, NOW)
    except TransferError as exc:
        assert str(exc).strip()
        return
    for conv in imported.conversations:
        assert isinstance(conv.title, str) and conv.title.strip()
        assert conv.created_at >= 0 and conv.updated_at >= 0
        for message in conv.messages:
            assert message.role in ROLES and isinstance(message.content, str)
    with ConversationStore(tmp_path / "fuzz.sqlite3") as store:
        before = len(store.list_conversations())
        store.add_conversations(imported.conversations)
        assert len(store.list_conversations()) == before + len(imported.conversations)


FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.slow  # fuzzing
@FUZZ
@given(document=mutated())
def test_a_damaged_file_of_any_format_imports_correctly_or_says_why(document, tmp_path):
    _imports_correctly_or_says_why(json.dumps(document), tmp_path)


@pytest.mark.slow  # fuzzing
@FUZZ
@given(document=JSON)
def test_any_json_imports_correctly_or_says_why(document, tmp_path):
    _imports_correctly_or_says_why(json.dumps(document), tmp_path)


@FUZZ
@given(text=st.text(max_size=200))
def test_any_text_imports_correctly_or_says_why(text, tmp_path):
    _imports_correctly_or_says_why(text, tmp_path)
