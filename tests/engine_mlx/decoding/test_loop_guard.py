"""The loop guard stops a reply at the first token that completes a loop, the same token in
every mode and step shape, and changes nothing before it."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.loop_guard import SPAN, LoopGuard
from engine_mlx.decoding.mtp_drafter import MTPDrafter
from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.events import Finished
from engine_mlx.server.requests import ApiError, parse_completion
from engine_mlx.session import Session
from tests.support.drafters import OracleDrafter, random_mtp_head


def test_a_cycle_stops_where_it_has_filled_the_span():
    prefix = list(range(100, 150))
    for period in (1, 2, 5, 24):
        cycle = list(range(period))
        tokens = prefix + cycle * (2 * SPAN)
        assert LoopGuard().feed(tokens) == len(prefix) + SPAN - 1


def test_text_that_repeats_for_less_than_the_span_runs_on():
    row = [7, 8] * (SPAN // 2 - 2)
    varied = [i % 97 for i in range(0, 4000, 7)]
    tokens = varied[:50] + row + varied[50:200] + [0] * (SPAN - 2) + varied[200:]
    assert LoopGuard().feed(tokens) is None
    assert LoopGuard().feed(list(range(25)) * 40) is None  # a cycle longer than 24 tokens


@settings(max_examples=60, deadline=None)
@given(
    body=st.lists(st.integers(0, 5), min_size=0, max_size=300),
    cuts=st.lists(st.integers(1, 9), min_size=1, max_size=80),
)
def test_the_stop_does_not_depend_on_how_tokens_arrive(body, cuts):
    tokens = body + [3, 1] * SPAN
    whole = LoopGuard().feed(tokens)
    guard, start, found = LoopGuard(), 0, None
    for n in itertools.cycle(cuts):
        if start >= len(tokens):
            break
        hit = guard.feed(tokens[start : start + n])
        if hit is not None:
            found = start + hit
            break
        start += n
    assert whole is not None and found == whole


def _replies(target, config, modes):
    mtp = MTPDrafter(random_mtp_head(target), target, steps=2)
    session = Session(target, OracleDrafter(target, block_size=5), mtp)
    out = {}
    for mode in modes:
        events = list(session.generate([5, 9, 11, 40], GenerationConfig(**config, mode=mode)))
        out[mode] = next(e for e in events if isinstance(e, Finished))
    return out


@pytest.mark.slow  # every mode, 400 tokens each, twice
@pytest.mark.parametrize("temperature", [0.0, 0.05])
def test_every_mode_stops_at_the_first_looping_token_and_keeps_the_text_before_it(
    tiny_target, temperature
):
    """The tiny random llama falls into a one-token loop within 300 tokens (greedy, and with
    one of these seeds sampled near greedy: the CPU's C filters draw another random stream
    than MLX's ops): each mode's guarded reply is its unguarded reply up to the guard's token,
    so nothing before the stop changes; greedy, every mode stops at the same token."""
    target = tiny_target("llama")
    modes = ["ar", "dflash2", "lookup", "mtp"] if temperature == 0 else ["ar", "lookup"]
    for seed in (31, 4):
        sampling = SamplingParams(temperature=temperature, seed=seed)
        base = {"max_tokens": 400, "sampling": sampling, "ignore_eos": True}
        free = _replies(target, base, modes)
        if all(LoopGuard().feed(reply.tokens) is not None for reply in free.values()):
            break
    guarded = _replies(target, base | {"loop_guard": True}, modes)
    for mode in modes:
        stop = LoopGuard().feed(free[mode].tokens)
        assert stop is not None and stop + 1 < len(free[mode].tokens), mode
        assert guarded[mode].tokens == free[mode].tokens[: stop + 1], mode
        assert guarded[mode].reason == "repetition", mode
        assert guarded[mode].text == target.tokenizer.decode(list(guarded[mode].tokens))
    if temperature == 0.0:
        assert len({finished.tokens for finished in guarded.values()}) == 1


def test_the_guard_is_off_unless_asked_for(tiny_target):
    target = tiny_target("llama")
    config = GenerationConfig(max_tokens=400, ignore_eos=True)
    finished = list(Session(target).generate([5, 9, 11, 40], config))[-1]
    assert finished.reason == "max_tokens" and len(finished.tokens) == 400


def test_a_server_request_asks_for_it_by_name(tiny_target):
    target = tiny_target("llama")
    body = {"model": "m", "prompt": "hi", "loop_guard": True}
    request = parse_completion(body, target, GenerationConfig(), chat=False)
    assert request.config.loop_guard is True
    assert (
        parse_completion({"prompt": "hi"}, target, GenerationConfig(), chat=False).config.loop_guard
        is False
    )
    with pytest.raises(ApiError, match="'loop_guard' must be true or false"):
        parse_completion(body | {"loop_guard": "yes"}, target, GenerationConfig(), chat=False)


def test_the_command_line_turns_it_on(tiny_model_dir, capsys):
    from engine_mlx.cli import main

    args = ["generate", "--model", str(tiny_model_dir("llama")), "--prompt", "ab", "--raw"]
    assert main([*args, "--max-tokens", "400", "--loop-guard", "on", "--json"]) == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["reason"] == "repetition" and last["stats"]["generated_tokens"] < 400


@pytest.mark.slow  # the real demo model
def test_the_demo_model_loop_at_the_apps_sampling_is_stopped(qwen_dir):
    """Qwen2.5-Coder, asked for 50 zeros at the app's sampling (seed 4), writes "0, " past
    the fiftieth and on to the token limit; the guard stops it at the token it names on the
    free reply, with the text before it unchanged."""
    from engine_mlx.api import encode_prompt, load_target

    target = load_target(qwen_dir)
    ids = encode_prompt(
        target,
        "Write a Python list with the first 50 multiples of zero.",
        chat=True,
        system="You are a helpful assistant.",
    )
    sampling = SamplingParams(temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05, seed=4)
    session = Session(target)
    config = GenerationConfig(max_tokens=200, sampling=sampling)
    free = list(session.generate(ids, config))[-1]
    assert free.reason == "max_tokens" and free.text.count("0, ") > 50  # past the fiftieth
    stop = LoopGuard().feed(free.tokens)
    assert stop is not None
    guarded = list(
        session.generate(ids, GenerationConfig(**{**config.__dict__, "loop_guard": True}))
    )[-1]
    assert guarded.reason == "repetition"
    assert guarded.tokens == free.tokens[: stop + 1]
