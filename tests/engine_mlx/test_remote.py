"""A remote OpenAI-compatible server as a session: the same text as local generation, the
server's speculation counts where it reports them, cancellation, clear errors."""

from __future__ import annotations

import threading

import pytest

from engine_mlx.api import encode_prompt, load_target
from engine_mlx.config import GenerationConfig
from engine_mlx.errors import EngineError
from engine_mlx.events import Error, Finished, Started, Tokens
from engine_mlx.remote import (
    Endpoint,
    RemoteSession,
    list_models,
    normalise_url,
    speculation_counts,
)
from engine_mlx.session import Session

MESSAGES = [{"role": "user", "content": "Tell me about the quick brown fox."}]


@pytest.mark.slow  # a server process
def test_remote_text_equals_local_generation(serve_process, tiny_folder) -> None:
    (model,) = list_models(serve_process)
    endpoint = Endpoint(normalise_url(serve_process), model)
    assert Endpoint.from_spec(endpoint.to_spec()) == endpoint
    config = GenerationConfig(max_tokens=16)
    events = list(RemoteSession(endpoint).generate(MESSAGES, config))
    assert isinstance(events[0], Started) and isinstance(events[-1], Finished)
    target = load_target(tiny_folder)
    local = list(Session(target).generate(encode_prompt(target, MESSAGES), config))[-1]
    finished = events[-1]
    assert finished.text == local.text
    assert "".join(e.text for e in events if isinstance(e, Tokens)) == local.text
    stats = finished.stats
    assert stats.generated_tokens == local.stats.generated_tokens
    assert stats.prompt_tokens == local.stats.prompt_tokens
    assert stats.tau == 1.0 and stats.modes == {"ar": stats.generated_tokens}  # served plain
    assert stats.ttft_s > 0 and stats.total_s >= stats.ttft_s


@pytest.mark.slow  # a server process
def test_cancel_stops_reading(serve_process) -> None:
    (model,) = list_models(serve_process)
    cancel = threading.Event()
    session = RemoteSession(Endpoint(normalise_url(serve_process), model))
    seen = []
    for event in session.generate(MESSAGES, GenerationConfig(max_tokens=400), cancel):
        seen.append(event)
        if isinstance(event, Tokens):
            cancel.set()
    assert seen[-1].reason == "cancelled" and len(seen) < 400


@pytest.mark.slow  # a server process
def test_unreachable_server_and_wrong_model(serve_process) -> None:
    with pytest.raises(EngineError, match="Cannot reach"):
        list_models("http://127.0.0.1:9")  # the discard port: nothing listens
    session = RemoteSession(Endpoint(normalise_url(serve_process), "no-such-model"))
    events = list(session.generate(MESSAGES, GenerationConfig(max_tokens=4)))
    assert isinstance(events[-1], Error) and "404" in events[-1].message


def test_speculation_counts_from_flashchat_and_llama_cpp() -> None:
    ours = {"flashchat": {"steps": 10, "drafted_tokens": 40, "accepted_tokens": 25}}
    assert speculation_counts(ours) == (10, 40, 25)
    llama = {"timings": {"predicted_n": 64, "draft_n": 48, "draft_n_accepted": 30}}
    assert speculation_counts(llama) == (34, 48, 30)  # 64 tokens, 30 of them drafts
    assert speculation_counts({"usage": {"completion_tokens": 3}}) is None
