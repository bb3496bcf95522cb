"""A thinking model behind the server, through the real ``openai`` client: reasoning apart
from the answer (``reasoning_content``, streamed as its own deltas) or inline, the template's
``enable_thinking`` and a per-request thinking budget, and per-part statistics."""

from __future__ import annotations

import openai
import pytest

from engine_mlx.config import GenerationConfig


@pytest.fixture
def thinking_folder(thinking_target, tmp_path):
    folder = tmp_path / "thinker"
    folder.symlink_to(thinking_target("qwen3", "qwen3_5").spec.path, target_is_directory=True)
    return folder


def _client(running) -> openai.OpenAI:
    return openai.OpenAI(base_url=running.url + "/v1", api_key="unused", max_retries=0)


def _stream(client, **extra):
    return client.chat.completions.create(
        model="thinker",
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=16,
        temperature=0,
        stream=True,
        extra_body=extra,
    )


def _ask(client, **extra):
    return client.chat.completions.create(
        model="thinker",
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=16,
        temperature=0,
        extra_body=extra,
    )


def test_reasoning_comes_apart_from_the_answer(start_server, thinking_folder):
    client = _client(start_server(model=thinking_folder))
    reply = _ask(client, thinking_budget=3)
    message = reply.choices[0].message
    reasoning = message.model_extra["reasoning_content"]
    assert reasoning and message.model_extra["reasoning"] == reasoning
    segments = reply.model_extra["flashchat"]["segments"]
    assert set(segments) == {"reasoning", "answer"} and segments["reasoning"]["tokens"] >= 1
    streamed = _stream(client, thinking_budget=3)
    thought, said = "", ""
    for chunk in streamed:
        if chunk.choices:
            delta = chunk.choices[0].delta
            thought += (delta.model_extra or {}).get("reasoning_content") or ""
            said += delta.content or ""
    assert thought == reasoning and said == message.content


def test_thinking_off_through_the_template_kwargs(start_server, thinking_folder):
    client = _client(start_server(model=thinking_folder))
    reply = _ask(client, chat_template_kwargs={"enable_thinking": False})
    assert "reasoning_content" not in (reply.choices[0].message.model_extra or {})
    assert reply.model_extra["flashchat"]["segments"]["reasoning"]["tokens"] == 0


def test_the_none_format_keeps_reasoning_in_the_content(start_server, thinking_folder):
    running = start_server(model=thinking_folder, reasoning_format="none")
    client = _client(running)
    content = _ask(client, thinking_budget=2).choices[0].message.content
    assert content.startswith("<think>") and "</think>" in content
    streamed = _stream(client, thinking_budget=2)
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == content


def test_the_servers_budget_is_the_default_and_a_bad_one_is_refused(start_server, thinking_folder):
    running = start_server(
        model=thinking_folder, base_config=GenerationConfig(max_tokens=16, thinking_budget=2)
    )
    client = _client(running)
    short = _ask(client).choices[0].message.model_extra["reasoning_content"]
    longer = _ask(client, thinking_budget=5).choices[0].message.model_extra["reasoning_content"]
    assert len(short) < len(longer)
    with pytest.raises(openai.BadRequestError, match="thinking_budget"):
        _ask(client, thinking_budget=-1)
    with pytest.raises(openai.BadRequestError, match="chat_template_kwargs"):
        _ask(client, chat_template_kwargs=[1])
