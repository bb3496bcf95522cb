"""The decode loop: plain greedy equals mlx-lm, and every way a generation ends."""

from __future__ import annotations

import threading

import mlx.core as mx
import pytest
from mlx_lm import load as mlx_lm_load
from mlx_lm.generate import generate_step

from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.events import Error, Finished, PrefillProgress, Started, Tokens
from engine_mlx.session import Session
from tests.conftest import ARCHS

PROMPT = "The quick brown fox"


def _run(session: Session, ids: list[int], cancel=None, **kw) -> list:
    return list(session.generate(ids, GenerationConfig(**kw), cancel))


def _mlx_lm_greedy(path, ids: list[int], n: int) -> list[int]:
    model, _ = mlx_lm_load(str(path))
    model.set_dtype(mx.float32)
    steps = generate_step(mx.array(ids), model, max_tokens=n)
    return [int(tok) for (tok, _), _ in zip(steps, range(n), strict=False)]


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_equals_mlx_lm(arch, tiny_target, tiny_model_dir):
    target = tiny_target(arch)
    ids = target.tokenizer.encode(PROMPT)
    events = _run(Session(target), ids, max_tokens=24, ignore_eos=True)
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.reason == "max_tokens"
    assert list(finished.tokens) == _mlx_lm_greedy(tiny_model_dir(arch), ids, 24)
    assert finished.stats.steps == 24 and finished.stats.tau == 1.0
    assert finished.stats.acceptance_rate is None
    assert finished.stats.context_depth == len(ids) + 24


def test_event_sequence_and_text(tiny_target):
    target = tiny_target("llama")
    ids = target.tokenizer.encode(PROMPT)
    events = _run(Session(target), ids, max_tokens=10, ignore_eos=True)
    assert isinstance(events[0], Started) and events[0].prompt_tokens == len(ids)
    assert isinstance(events[1], PrefillProgress) and events[1].done == len(ids)
    tokens = [e for e in events if isinstance(e, Tokens)]
    finished = events[-1]
    assert [t for e in tokens for t in e.token_ids] == list(finished.tokens)
    assert "".join(e.text for e in tokens) in finished.text
    assert finished.text == target.tokenizer.decode(list(finished.tokens))
    assert [e.context_depth for e in tokens] == list(range(len(ids) + 1, len(ids) + 11))


def test_sampled_generation_reproduces_with_seed(tiny_target):
    target = tiny_target("qwen3")
    ids = target.tokenizer.encode(PROMPT)
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=123)
    a = _run(Session(target), ids, max_tokens=16, sampling=params, ignore_eos=True)[-1]
    b = _run(Session(target), ids, max_tokens=16, sampling=params, ignore_eos=True)[-1]
    greedy = _run(Session(target), ids, max_tokens=16, ignore_eos=True)[-1]
    assert a.tokens == b.tokens
    assert a.tokens != greedy.tokens


def test_eos_ends_generation(tiny_target):
    target = tiny_target("llama")
    ids = target.tokenizer.encode(PROMPT)
    free = _run(Session(target), ids, max_tokens=12, ignore_eos=True)[-1].tokens
    session = Session(target)
    session.eos = {free[4]}  # pretend the fifth greedy token is the end of the reply
    finished = _run(session, ids, max_tokens=12)[-1]
    assert finished.reason == "eos"
    assert finished.tokens == free[: free.index(free[4])]


def test_stop_string_cuts_text(tiny_target):
    target = tiny_target("llama")
    ids = target.tokenizer.encode(PROMPT)
    full = _run(Session(target), ids, max_tokens=16, ignore_eos=True)[-1]
    stop = full.text[len(full.text) // 2 :][:3]
    assert stop
    finished = _run(Session(target), ids, max_tokens=16, stop_strings=(stop,), ignore_eos=True)[-1]
    assert finished.reason == "stop_string"
    assert finished.text == full.text[: full.text.find(stop)]


def test_cancel_mid_generation(tiny_target):
    target = tiny_target("llama")
    cancel = threading.Event()
    seen = 0
    events = []
    for event in Session(target).generate(
        target.tokenizer.encode(PROMPT), GenerationConfig(max_tokens=200, ignore_eos=True), cancel
    ):
        events.append(event)
        if isinstance(event, Tokens):
            seen += 1
            if seen == 3:
                cancel.set()
    finished = events[-1]
    assert finished.reason == "cancelled"
    assert len(finished.tokens) == 3


def test_cancel_before_prefill(tiny_target):
    target = tiny_target("llama")
    cancel = threading.Event()
    cancel.set()
    events = list(Session(target).generate([1, 2, 3], GenerationConfig(), cancel))
    assert events[-1].reason == "cancelled" and events[-1].tokens == ()


def test_prompt_longer_than_context(tiny_target):
    target = tiny_target("llama")
    events = list(Session(target).generate([5] * 600, GenerationConfig()))
    assert len(events) == 1 and isinstance(events[0], Error)
    assert "600 tokens" in events[0].message and "512" in events[0].message


def test_context_fills_up(tiny_target):
    target = tiny_target("llama")
    finished = list(
        Session(target).generate([5] * 500, GenerationConfig(max_tokens=50, ignore_eos=True))
    )[-1]
    assert finished.reason == "context_full"
    assert len(finished.tokens) == 12 and finished.stats.context_depth == 512


def test_unknown_mode_and_bad_max_tokens(tiny_target):
    session = Session(tiny_target("llama"))
    assert isinstance(next(iter(session.generate([1], GenerationConfig(mode="warp")))), Error)
    assert isinstance(next(iter(session.generate([1], GenerationConfig(max_tokens=0)))), Error)
