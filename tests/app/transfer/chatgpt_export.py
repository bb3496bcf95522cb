"""A small ChatGPT ``conversations.json`` in the shape its data export writes: each
conversation is a tree of message nodes (``mapping``), edits and regenerations make branches,
and ``current_node`` is the leaf of the branch the user last saw."""

from __future__ import annotations

from typing import Any


def _node(node_id, parent, children, role=None, parts=None, kind="text", t=None, **extra):
    message = None
    if role is not None:
        content: dict[str, Any] = {"content_type": kind}
        if parts is not None:
            content["parts"] = parts
        content.update(extra.pop("content", {}))
        message = {
            "id": node_id,
            "author": {"role": role, "name": None, "metadata": {}},
            "create_time": t,
            "update_time": None,
            "content": content,
            "status": "finished_successfully",
            "end_turn": True,
            "weight": 1.0,
            "metadata": extra.pop("metadata", {}),
            "recipient": extra.pop("recipient", "all"),
        }
    return node_id, {"id": node_id, "message": message, "parent": parent, "children": children}


def chatgpt_export() -> list[dict]:
    """Two conversations: a branched one with a hidden system turn, a tool call, an image
    and a reasoning summary; and one with no title."""
    first = dict(
        [
            _node("root", None, ["sys"]),
            _node(
                "sys",
                "root",
                ["u1"],
                "system",
                [""],
                metadata={"is_visually_hidden_from_conversation": True},
            ),
            _node(
                "u1", "sys", ["a1"], "user", ["How do I reverse a list in Python?"], t=1700000000.5
            ),
            _node(
                "a1",
                "u1",
                ["u2-old", "u2"],
                "assistant",
                ["Use `xs[::-1]` or `xs.reverse()`."],
                t=1700000003.25,
            ),
            _node("u2-old", "a1", ["a2-old"], "user", ["And a tuple?"], t=1700000010.0),
            _node("a2-old", "u2-old", [], "assistant", ["Tuples: `t[::-1]`."], t=1700000012.0),
            _node(
                "u2",
                "a1",
                ["tool1"],
                "user",
                [
                    {"content_type": "image_asset_pointer", "asset_pointer": "file-service://x"},
                    "What is in this screenshot?",
                ],
                kind="multimodal_text",
                t=1700000020.0,
            ),
            _node("tool1", "u2", ["think"], "tool", ["OCR: def f(): pass"], t=1700000021.0),
            _node(
                "think",
                "tool1",
                ["a2"],
                "assistant",
                None,
                kind="thoughts",
                t=1700000022.0,
                content={
                    "thoughts": [
                        {"summary": "Reading", "content": "The image shows a stub function."}
                    ]
                },
            ),
            _node(
                "a2",
                "think",
                [],
                "assistant",
                ["It shows a Python function that does nothing."],
                t=1700000024.0,
            ),
        ]
    )
    second = dict(
        [
            _node("r", None, ["q"]),
            _node("q", "r", ["code"], "user", ["Compute 2**10"], t=1700100000.0),
            _node(
                "code",
                "q",
                ["ans"],
                "assistant",
                None,
                kind="code",
                t=1700100001.0,
                content={"text": "print(2**10)"},
                recipient="python",
            ),
            _node("ans", "code", [], "assistant", ["2**10 is 1024."], t=1700100002.0),
        ]
    )
    return [
        {
            "title": "Reversing lists",
            "create_time": 1700000000.0,
            "update_time": 1700000024.0,
            "mapping": first,
            "moderation_results": [],
            "current_node": "a2",
            "conversation_id": "c-1",
            "id": "c-1",
        },
        {
            "title": None,
            "create_time": 1700100000.0,
            "update_time": 1700100002.0,
            "mapping": second,
            "current_node": "ans",
            "id": "c-2",
        },
    ]
