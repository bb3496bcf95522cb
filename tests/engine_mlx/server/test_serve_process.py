"""``python -m engine_mlx serve`` with the real ``openai`` client: the same greedy text as
``generate``, streamed or not, with usage and FlashChat's statistics; clients take turns."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import openai
import pytest

pytestmark = pytest.mark.slow  # a server process, and `generate` in processes of their own
MESSAGES = [{"role": "user", "content": "Tell me about the quick brown fox."}]


def generate_json(folder: Path, tmp_path: Path, max_tokens: int) -> dict:
    """What ``generate --json`` answers for MESSAGES (its last event)."""
    prompt = tmp_path / "chat.json"
    prompt.write_text(json.dumps(MESSAGES))
    command = [sys.executable, "-m", "engine_mlx", "generate", "--model", str(folder)]
    command += ["--prompt-file", str(prompt), "--max-tokens", str(max_tokens), "--json"]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def client(serve_process: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=serve_process + "/v1", api_key="unused", max_retries=0)


def test_chat_completions_equal_generate(client, tiny_folder, tmp_path) -> None:
    expected = generate_json(tiny_folder, tmp_path, 24)
    model = client.models.list().data[0].id
    reply = client.chat.completions.create(
        model=model, messages=MESSAGES, temperature=0, max_tokens=24
    )
    assert reply.choices[0].message.content == expected["text"]
    assert reply.usage.completion_tokens == len(expected["tokens"])
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    stats = reply.model_extra["flashchat"]
    assert stats["modes"] == {"ar": reply.usage.completion_tokens}
    assert stats["steps"] == reply.usage.completion_tokens and stats["tau"] == 1.0
    total = reply.usage.total_tokens
    assert total - 1 <= stats["context_depth"] <= total  # an EOS ending is not fed back

    stream = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        temperature=0,
        max_tokens=24,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected["text"]
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and "flashchat" in finish[0].model_extra
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens


def test_text_completions_and_mode_per_request(client) -> None:
    model = client.models.list().data[0].id
    reply = client.completions.create(model=model, prompt="The quick", max_tokens=5, temperature=0)
    assert reply.choices[0].text and reply.usage.completion_tokens <= 5
    lookup = client.chat.completions.create(
        model=model, messages=MESSAGES, temperature=0, max_tokens=12, extra_body={"mode": "lookup"}
    )
    plain = client.chat.completions.create(
        model=model, messages=MESSAGES, temperature=0, max_tokens=12
    )
    assert lookup.model_extra["flashchat"]["mode"] == "lookup"
    assert lookup.choices[0].message.content == plain.choices[0].message.content  # lossless


def test_concurrent_clients_are_served_in_turn(client) -> None:
    model = client.models.list().data[0].id
    answers: dict[int, str] = {}

    def ask(i: int) -> None:
        reply = client.chat.completions.create(
            model=model, messages=MESSAGES, temperature=0, max_tokens=16
        )
        answers[i] = reply.choices[0].message.content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(answers) == 2 and answers[0] == answers[1]


def test_a_non_loopback_bind_without_a_key_is_refused(tiny_folder) -> None:
    command = [sys.executable, "-m", "engine_mlx", "serve", "--model", str(tiny_folder)]
    result = subprocess.run([*command, "--host", "0.0.0.0"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "without an API key" in result.stderr and "--api-key" in result.stderr
