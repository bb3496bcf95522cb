"""Tau and acceptance of a remote vLLM or SGLang model, from replies recorded in those servers'
own shapes (tests/engine_mlx/fixtures/remote, README.md there names the versions and source
files): the parsing on its own, then a RemoteSession against a real local HTTP server that
answers with the recordings."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine_mlx.config import GenerationConfig
from engine_mlx.events import Error, Finished
from engine_mlx.remote import Endpoint, RemoteSession, metrics_url
from engine_mlx.remote_speculation import (
    counts_from_counters,
    server_kind,
    speculation_counts,
    vllm_counters,
)

FIXTURES = Path(__file__).parent / "fixtures" / "remote"
MODEL = "Qwen/Qwen3-8B"
MESSAGES = [{"role": "user", "content": "Tell me about the quick brown fox."}]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def chunks(name: str) -> list[dict[str, Any]]:
    """The JSON chunks of a recorded stream, as a client reads them."""
    lines = fixture(name).splitlines()
    return [json.loads(x[5:]) for x in lines if x.startswith("data:") and x != "data: [DONE]"]


def streamed_text(name: str) -> str:
    deltas = (c["delta"] for chunk in chunks(name) for c in chunk["choices"])
    return "".join(d.get("content") or "" for d in deltas)


# --- the parsing --------------------------------------------------------------------------


def test_the_model_list_tells_vllm_from_sglang() -> None:
    assert server_kind(json.loads(fixture("vllm_models.json")), MODEL) == "vllm"
    assert server_kind(json.loads(fixture("sglang_models.json")), MODEL) == "sglang"
    llama = {"data": [{"id": "m", "owned_by": "llamacpp"}]}
    assert server_kind(llama, "m") == ""
    assert server_kind({"data": [{"id": "m", "owned_by": "flashchat"}]}, "m") == ""
    assert server_kind({"error": "no"}, "m") == "" and server_kind([], "m") == ""


def test_vllm_counters_are_summed_over_engines_and_nothing_else() -> None:
    before = vllm_counters(fixture("vllm_0_27_metrics_before.txt"), MODEL)
    # engines 0 and 1; the per-position and _created series are not the totals
    assert before == {"drafts": 1410 + 1187, "drafted": 4230 + 3561, "accepted": 2711 + 2250}
    after = vllm_counters(fixture("vllm_0_27_metrics_after.txt"), MODEL)
    assert counts_from_counters(before, after, generated=96) == (34, 90, 62)
    assert metrics_url("http://gpu.lan:8000/v1") == "http://gpu.lan:8000/metrics"


def test_vllm_counters_of_another_model_or_without_total_are_read_right() -> None:
    page = (
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="a \\"b\\""} 30.0\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="other"} 500.0\n'
        'vllm:spec_decode_num_accepted_tokens{engine="0",model_name="a \\"b\\""} 12\n'
        "vllm:spec_decode_num_accepted_tokens_total{broken 7\n"
        "vllm:spec_decode_num_drafts_total NaNa\n"
    )
    assert vllm_counters(page, 'a "b"') == {"drafted": 30.0, "accepted": 12.0}
    assert vllm_counters(page, "unnamed")["drafted"] == 530.0  # no label names it: all count
    assert vllm_counters("<html>Not found</html>", MODEL) == {}


def test_counters_that_cannot_be_one_replys_give_nothing() -> None:
    before = {"drafts": 100.0, "drafted": 300.0, "accepted": 200.0}
    busy = {"drafts": 400.0, "drafted": 1200.0, "accepted": 800.0}  # others ran meanwhile
    assert counts_from_counters(before, busy, generated=96) is None
    restarted = {"drafts": 10.0, "drafted": 30.0, "accepted": 20.0}
    assert counts_from_counters(before, restarted, generated=96) is None
    assert counts_from_counters(before, before, generated=96) == (96, 0, 0)  # drafted nothing
    assert counts_from_counters(before, {}, generated=96) is None


def test_vllm_per_reply_metrics() -> None:
    last = chunks("vllm_0_29_chat_stream.sse")[-1]
    # 118 tokens, 74 of them accepted drafts: 44 steps (1 prefill, 41 drafting, 2 plain)
    assert speculation_counts(last) == (44, 123, 74)
    # cut at max_tokens: accepted drafts beyond the cut are still counted by the server
    cut = {**last, "usage": {**last["usage"], "completion_tokens": 100}}
    assert speculation_counts(cut) == (42, 123, 74)  # 41 drafting steps and the prefill


def test_sglang_details_exact_legacy_and_derived() -> None:
    sglext = next(c for c in chunks("sglang_chat_stream.sse") if c.get("sglext"))
    assert speculation_counts({**sglext, "usage": {"completion_tokens": 128}}) == (50, 150, 78)
    # not streamed, return_meta_info, the names before spec_num_*
    not_streamed = json.loads(fixture("sglang_0_5_chat_meta_info.json"))
    assert speculation_counts(not_streamed) == (50, 150, 78)
    # only rate and length: accepted = tokens - steps, drafted = accepted / rate
    partial = {"spec_verify_ct": 50, "spec_accept_rate": 0.52, "spec_accept_length": 2.56}
    report = {"sglext": {"spec_tokens_details": partial}, "usage": {"completion_tokens": 128}}
    assert speculation_counts(report) == (50, 150, 78)
    assert speculation_counts({"sglext": report["sglext"]}) == (50, 150, 78)  # tokens from length
    no_rate = {"sglext": {"spec_tokens_details": {"spec_verify_ct": 50}}}
    assert speculation_counts({**no_rate, "usage": {"completion_tokens": 128}}) == (50, 0, 78)
    none_verified = {"sglext": {"spec_tokens_details": {"spec_verify_ct": 0}}}
    assert speculation_counts(none_verified) is None


def test_odd_values_from_a_server_are_no_numbers_and_no_error() -> None:
    assert speculation_counts({"metrics": [1], "sglext": "x", "choices": ["a"]}) is None
    odd = {"num_draft_tokens": "many", "num_accepted_draft_tokens": None, "num_spec_steps": 1e400}
    assert speculation_counts({"metrics": {"speculative_decoding": odd}}) == (0, 0, 0)
    page = 'vllm:spec_decode_num_draft_tokens_total{engine="0"} +Inf\n'
    assert vllm_counters(page, MODEL) == {}


# --- a RemoteSession against recorded replies --------------------------------------------


@dataclass
class Recorded:
    """What a recorded server answers: its model list, one chat stream (SSE), and its
    ``/metrics`` page as it was before the chat and after it."""

    models: str
    stream: str
    metrics_before: str = ""
    metrics_after: str = ""
    metrics_status: int = 200
    requests: list[tuple[str, str]] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    chats: int = 0


@contextmanager
def recorded_server(recorded: Recorded) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: str, kind: str) -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            recorded.requests.append(("GET", self.path))
            if self.path == "/v1/models":
                self._answer(200, recorded.models, "application/json")
            elif self.path == "/metrics":
                page = recorded.metrics_after if recorded.chats else recorded.metrics_before
                self._answer(recorded.metrics_status, page, "text/plain; version=0.0.4")
            else:
                self._answer(404, '{"detail":"Not Found"}', "application/json")

        def do_POST(self) -> None:
            recorded.requests.append(("POST", self.path))
            length = int(self.headers.get("Content-Length", 0))
            recorded.bodies.append(json.loads(self.rfile.read(length)))
            recorded.chats += 1
            self._answer(200, recorded.stream, "text/event-stream")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def finished(session: RemoteSession) -> Finished:
    events = list(session.generate(MESSAGES, GenerationConfig(max_tokens=256)))
    assert isinstance(events[-1], Finished), events[-1]
    return events[-1]


MODELS = ("GET", "/v1/models")
METRICS = ("GET", "/metrics")
CHAT = ("POST", "/v1/chat/completions")


def vllm(stream: str) -> Recorded:
    """A vLLM server answering with the recorded ``stream``, its counters moving by it."""
    before, after = "vllm_0_27_metrics_before.txt", "vllm_0_27_metrics_after.txt"
    return Recorded(fixture("vllm_models.json"), fixture(stream), fixture(before), fixture(after))


def test_vllm_without_per_reply_numbers_is_read_from_metrics_around_the_reply() -> None:
    recorded = vllm("vllm_0_27_chat_stream.sse")
    with recorded_server(recorded) as url:
        done = finished(RemoteSession(Endpoint(url, MODEL)))
    assert recorded.requests == [MODELS, METRICS, CHAT, METRICS]
    assert "return_spec_tokens_details" not in recorded.bodies[0]
    assert done.text == streamed_text("vllm_0_27_chat_stream.sse")
    stats = done.stats
    assert (stats.generated_tokens, stats.steps, stats.drafted, stats.accepted) == (96, 34, 90, 62)
    assert stats.tau == 96 / 34 and stats.acceptance_rate == 62 / 90


def test_vllm_with_per_reply_numbers_stops_reading_metrics() -> None:
    recorded = vllm("vllm_0_29_chat_stream.sse")
    with recorded_server(recorded) as url:
        session = RemoteSession(Endpoint(url, MODEL))
        first = finished(session)
        assert recorded.requests == [MODELS, METRICS, CHAT]  # the reply had its own numbers
        second = finished(session)
    assert recorded.requests == [MODELS, METRICS, CHAT, CHAT]
    for done in (first, second):
        assert (done.stats.steps, done.stats.drafted, done.stats.accepted) == (44, 123, 74)
        assert done.stats.tau == 118 / 44 and done.stats.acceptance_rate == 74 / 123


def test_sglang_is_asked_for_its_details_and_never_for_metrics() -> None:
    recorded = Recorded(fixture("sglang_models.json"), fixture("sglang_chat_stream.sse"))
    with recorded_server(recorded) as url:
        done = finished(RemoteSession(Endpoint(url, MODEL)))
    assert recorded.requests == [MODELS, CHAT]
    assert recorded.bodies[0]["return_spec_tokens_details"] is True
    assert done.text == streamed_text("sglang_chat_stream.sse")
    stats = done.stats
    assert (stats.generated_tokens, stats.steps, stats.drafted, stats.accepted) == (
        128,
        50,
        150,
        78,
    )
    assert stats.tau == 128 / 50 and stats.acceptance_rate == 78 / 150


def test_sglang_before_the_details_leaves_tau_unknown() -> None:
    recorded = Recorded(fixture("sglang_models.json"), fixture("sglang_0_5_chat_stream.sse"))
    with recorded_server(recorded) as url:
        done = finished(RemoteSession(Endpoint(url, MODEL)))
    assert done.text == streamed_text("sglang_0_5_chat_stream.sse")
    assert done.stats.generated_tokens == 128
    assert math.isnan(done.stats.tau) and done.stats.acceptance_rate is None


@pytest.mark.parametrize(
    ("status", "page"),
    [(404, '{"detail":"Not Found"}'), (200, "<html><body>login</body></html>"), (500, "")],
)
def test_metrics_that_cannot_be_read_never_break_the_chat(status: int, page: str) -> None:
    recorded = Recorded(
        fixture("vllm_models.json"), fixture("vllm_0_27_chat_stream.sse"), page, page, status
    )
    with recorded_server(recorded) as url:
        session = RemoteSession(Endpoint(url, MODEL))
        first, second = finished(session), finished(session)
    assert recorded.requests == [MODELS, METRICS, CHAT, CHAT]  # tried once, then left alone
    for done in (first, second):
        assert done.text == streamed_text("vllm_0_27_chat_stream.sse")
        assert math.isnan(done.stats.tau) and done.stats.acceptance_rate is None


def test_other_servers_get_nothing_of_their_own() -> None:
    models = json.dumps({"object": "list", "data": [{"id": MODEL, "owned_by": "llamacpp"}]})
    recorded = Recorded(
        models,
        fixture("vllm_0_27_chat_stream.sse"),
        fixture("vllm_0_27_metrics_before.txt"),
        fixture("vllm_0_27_metrics_after.txt"),
    )
    with recorded_server(recorded) as url:
        session = RemoteSession(Endpoint(url, MODEL))
        finished(session)
        done = finished(session)
    assert recorded.requests == [MODELS, CHAT, CHAT]  # the model list asked once
    assert all("return_spec_tokens_details" not in body for body in recorded.bodies)
    assert math.isnan(done.stats.tau) and done.stats.generated_tokens == 96


def test_an_error_mid_stream_ends_the_reply_as_an_error_not_as_finished() -> None:
    """A server that fails mid-reply (FlashChat's pipeline losing a rank) sends an error
    chunk after some text: the reply is not finished, so the app keeps it as interrupted."""
    head = "".join(line + "\n" for line in fixture("sglang_0_5_chat_stream.sse").splitlines()[:8])
    failure = {"error": {"message": "the model's pipeline broke: rank 1", "type": "server_error"}}
    stream = head + f"data: {json.dumps(failure)}\n\ndata: [DONE]\n\n"
    recorded = Recorded(models='{"data": []}', stream=stream)
    with recorded_server(recorded) as url:
        session = RemoteSession(Endpoint(url, MODEL))
        events = list(session.generate(MESSAGES, GenerationConfig(max_tokens=256)))
    assert not any(isinstance(e, Finished) for e in events)
    assert isinstance(events[-1], Error) and "pipeline broke: rank 1" in events[-1].message
