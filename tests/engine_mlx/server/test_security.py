"""Issue #65 over real HTTP: no web page can drive the server (Host, Origin, Content-Type),
a refused body costs nothing, malformed numbers and nesting are 400s, a client that leaves a
non-streamed request stops its generation at once, ``/health`` says nothing to strangers."""

from __future__ import annotations

import json
import socket
import threading

import httpx
import pytest

from engine_mlx.events import Finished, Tokens
from engine_mlx.server.access import AccessPolicy
from engine_mlx.server.guard import MAX_BODY_BYTES

MESSAGES = [{"role": "user", "content": "Tell me about the quick brown fox."}]
EVIL = {"Host": "evil.example", "Origin": "https://evil.example", "Content-Type": "text/plain"}


def chat(model: str, **extra) -> dict:
    return {"model": model, "messages": MESSAGES, "temperature": 0, "max_tokens": 4, "mode": "ar",
            **extra}  # fmt: skip


def post(url: str, body: dict | bytes, **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **headers}
    return httpx.post(url + "/v1/chat/completions", content=content, headers=headers, timeout=60)


def test_a_web_page_cannot_drive_the_server(refusing_server) -> None:
    """The probe (a rebinding page's text/plain POST) and each of its parts alone."""
    url, model = refusing_server.url, refusing_server.server.model_name
    body = json.dumps(chat(model)).encode()
    probe = httpx.post(url + "/v1/chat/completions", content=body, headers=EVIL)
    assert probe.status_code == 403 and probe.json()["error"]["code"] == "host_not_allowed"
    assert "--allowed-hosts" in probe.json()["error"]["message"]
    port = url.rsplit(":", 1)[1]
    for host in (f"evil.example:{port}", "127.0.0.1.nip.io", "localhost.evil.example"):
        assert post(url, body, Host=host).status_code == 403
    origin = post(url, body, Origin="https://evil.example")
    assert origin.status_code == 403 and origin.json()["error"]["code"] == "origin_not_allowed"
    assert "--allowed-origins https://evil.example" in origin.json()["error"]["message"]
    assert post(url, body, Origin="null").status_code == 403
    for kind in ("text/plain", "application/x-www-form-urlencoded", ""):
        refused = post(url, body, **{"Content-Type": kind})
        assert refused.status_code == 415 and refused.json()["error"]["type"]
    preflight = httpx.options(
        url + "/v1/chat/completions",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 403


def test_local_and_allowed_pages_and_names_are_answered(start_server) -> None:
    policy = AccessPolicy(allowed_hosts=("flashchat.lan",), allowed_origins=("https://ui.example",))
    running = start_server(access=policy)
    url, model = running.url, running.server.model_name
    port = url.rsplit(":", 1)[1]
    for headers in (
        {"Host": f"localhost:{port}", "Origin": "http://localhost:3000"},
        {"Host": f"[::1]:{port}", "Origin": "https://ui.example"},
        {"Host": "flashchat.lan"},
        {},
    ):
        reply = post(url, chat(model), **headers)
        assert reply.status_code == 200, (headers, reply.text)
        if "Origin" in headers:  # the page may read the reply
            assert reply.headers["access-control-allow-origin"]
    assert post(url, chat(model), Origin="https://other.example").status_code == 403


def test_oversized_bodies_are_refused_before_they_are_read(refusing_server) -> None:
    url = refusing_server.url
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 400000000\r\n\r\n"
        )  # and not one byte of the body
        head = sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 413") and b"connection: close" in head.lower()
    huge = b'{"model": "x", "pad": "' + b"a" * MAX_BODY_BYTES + b'"}'
    reply = post(url, huge)
    assert reply.status_code == 413 and reply.json()["error"]["code"] == "body_too_large"


@pytest.mark.parametrize(
    ("body", "param", "needle"),
    [
        (b"[" * 100_000 + b"]" * 100_000, None, "deeply"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, None, "deeply"),
        (json.dumps(chat("MODEL", seed=-1)).encode(), "seed", "2^64 - 1"),
        (json.dumps(chat("MODEL", seed=2**64)).encode(), "seed", "from 0 to"),
    ],
)
def test_deep_nesting_and_seeds_out_of_range_are_400s(refusing_server, body, param, needle):
    body = body.replace(b"MODEL", refusing_server.server.model_name.encode())
    reply = post(refusing_server.url, body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and needle in error["message"]


def test_an_empty_prompt_is_its_own_400(refusing_server) -> None:
    url, model = refusing_server.url, refusing_server.server.model_name
    reply = httpx.post(url + "/v1/completions", json={"model": model, "prompt": ""}, timeout=60)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "empty_prompt" and error["param"] == "prompt"


def test_health_tells_strangers_only_that_it_is_up(start_server) -> None:
    running = start_server(api_key="s3cret")
    assert httpx.get(running.url + "/health").json() == {"status": "ok"}
    keyed = httpx.get(running.url + "/health", headers={"Authorization": "Bearer s3cret"})
    assert keyed.json() == {"status": "ok", "model": running.server.model_name}


def test_a_non_streamed_client_that_leaves_stops_within_a_step(start_server) -> None:
    """The engine paces its steps (each waits at most 0.1 s for the cancel), so events never
    stop flowing: the disconnect must be noticed while they flow, not in a pause between."""
    generating, left = threading.Event(), threading.Event()
    after: list[Tokens] = []
    finished: list[Finished] = []
    holder: dict = {}

    def watch(event) -> None:  # on the engine thread
        if isinstance(event, Finished):
            finished.append(event)
        elif isinstance(event, Tokens):
            job = holder["server"].runner.current
            first = holder.setdefault("job", job)
            generating.set()
            if left.is_set() and job is first:
                after.append(event)
            job.cancel.wait(timeout=0.1)

    running = start_server(on_event=watch)
    holder["server"] = running.server
    body = json.dumps(chat(running.server.model_name, max_tokens=60)).encode()
    host, port = running.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
        b"application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    assert generating.wait(timeout=60)
    sock.close()
    left.set()
    model = running.server.model_name
    reply = httpx.post(running.url + "/v1/chat/completions", json=chat(model), timeout=60)
    assert reply.status_code == 200  # the engine is free again
    assert finished[0].reason == "cancelled", finished[0].reason
    assert len(after) <= 2  # the step under way when it left, and at most one more
