"""The server's guarantees, checked over real HTTP: a full queue answers 429, a client that
leaves cancels its generation and frees the engine, bad requests get OpenAI-style 4xx."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from engine_mlx.config import GenerationConfig
from engine_mlx.events import Finished, Tokens
from engine_mlx.server.guard import MAX_BODY_BYTES
from engine_mlx.server.runner import Job

MESSAGES = [{"role": "user", "content": "Tell me about the quick brown fox."}]


def chat_body(model: str, **extra) -> dict:
    return {"model": model, "messages": MESSAGES, "temperature": 0, "max_tokens": 8, **extra}


def test_a_full_queue_answers_429_with_retry_after(start_server) -> None:
    running = start_server(max_waiting=0)  # one generation, nothing may wait
    held, release = threading.Event(), threading.Event()

    def hold(event) -> None:  # the engine thread waits here: the one slot stays taken
        held.set()
        release.wait(timeout=60)

    ids = running.server.session.target.tokenizer.encode("hello")
    running.server.runner.submit(Job(ids, GenerationConfig(max_tokens=2), hold))
    assert held.wait(timeout=30)
    model = running.server.model_name
    try:
        reply = httpx.post(running.url + "/v1/chat/completions", json=chat_body(model))
        assert reply.status_code == 429 and reply.headers["retry-after"] == "2"
        assert reply.json()["error"]["code"] == "queue_full"
    finally:
        release.set()
    after = httpx.post(running.url + "/v1/chat/completions", json=chat_body(model), timeout=60)
    assert after.status_code == 200  # the slot came back


def test_a_client_that_leaves_cancels_and_frees_the_engine(start_server) -> None:
    finished: list[Finished] = []
    left = threading.Event()
    holder: dict = {}

    def watch(event) -> None:  # on the engine thread, after each event reached the client
        if isinstance(event, Finished):
            finished.append(event)
        elif isinstance(event, Tokens) and not left.is_set():
            left.wait(timeout=30)  # the client disconnects after its first text
            job = holder["server"].runner.current
            for _ in range(3000):  # until the server noticed (it polls the connection)
                if job.cancel.is_set():
                    break
                time.sleep(0.01)

    running = start_server(on_event=watch)
    holder["server"] = running.server
    body = chat_body(running.server.model_name, max_tokens=400, stream=True)
    url = running.url + "/v1/chat/completions"
    with httpx.Client(timeout=60) as client, client.stream("POST", url, json=body) as stream:
        for line in stream.iter_lines():
            if '"content"' in line and '"role"' not in line:
                break  # the first text: leave
    left.set()
    for _ in range(3000):
        if finished:
            break
        time.sleep(0.01)
    assert finished and finished[0].reason == "cancelled"
    assert finished[0].stats.generated_tokens < 400
    reply = httpx.post(
        running.url + "/v1/chat/completions", json=chat_body(running.server.model_name), timeout=60
    )
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (json.dumps({"messages": MESSAGES}).encode(), 400, "model"),
        (json.dumps({"model": "MODEL", "messages": "hi"}).encode(), 400, "messages"),
        (
            json.dumps({"model": "MODEL", "messages": MESSAGES, "temperature": "hot"}).encode(),
            400,
            "temperature",
        ),
        (
            json.dumps({"model": "MODEL", "messages": MESSAGES, "max_tokens": 0}).encode(),
            400,
            "max_tokens",
        ),
        (json.dumps({"model": "MODEL", "messages": MESSAGES, "stop": [1]}).encode(), 400, "stop"),
        (json.dumps({"model": "MODEL", "messages": MESSAGES, "n": 2}).encode(), 400, "n"),
        (
            json.dumps({"model": "MODEL", "messages": MESSAGES, "repetition_penalty": 0}).encode(),
            400,
            "repetition_penalty",
        ),
        (
            json.dumps({"model": "MODEL", "messages": MESSAGES, "mode": "warp"}).encode(),
            400,
            "mode",
        ),
        (json.dumps({"model": "MODEL", "messages": MESSAGES, "mode": "mtp"}).encode(), 400, "mode"),
        (json.dumps({"model": "gpt-9", "messages": MESSAGES}).encode(), 404, "model"),
    ],
)
def test_bad_requests_get_openai_errors(refusing_server, body: bytes, status: int, param) -> None:
    running = refusing_server
    body = body.replace(b"MODEL", running.server.model_name.encode())
    reply = httpx.post(
        running.url + "/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert reply.status_code == status
    error = reply.json()["error"]
    assert error["message"] and error["type"] and error["param"] == param


def test_too_long_prompt_and_body(refusing_server) -> None:
    running = refusing_server
    model = running.server.model_name
    words = " ".join(["fox"] * 2000)  # the tiny model's context is 512 tokens
    long = {"model": model, "messages": [{"role": "user", "content": words}]}
    reply = httpx.post(running.url + "/v1/chat/completions", json=long)
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "context_length_exceeded"
    huge = b'{"model": "x", "pad": "' + b"a" * MAX_BODY_BYTES + b'"}'
    reply = httpx.post(
        running.url + "/v1/completions", content=huge, headers={"content-type": "application/json"}
    )
    assert reply.status_code == 413


def test_api_key_is_required_when_set(start_server) -> None:
    running = start_server(api_key="s3cret")
    model = running.server.model_name
    assert httpx.get(running.url + "/v1/models").status_code == 401
    wrong = httpx.get(running.url + "/v1/models", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    ok = httpx.post(
        running.url + "/v1/chat/completions",
        json=chat_body(model),
        headers={"Authorization": "Bearer s3cret"},
        timeout=60,
    )
    assert ok.status_code == 200
