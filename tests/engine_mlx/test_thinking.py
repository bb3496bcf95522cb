"""Thinking models: the reply splits into reasoning and answer, the budget forces the end
marker at the same token in every mode, and models that do not think are unchanged."""

from __future__ import annotations

import json

import pytest

from engine_mlx.api import encode_prompt
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.mtp_drafter import MTPDrafter
from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.events import Tokens
from engine_mlx.session import Session
from engine_mlx.thinking import Part, ReasoningState, ThinkingBudget, ThinkingMarkers
from tests.support.drafters import OracleDrafter, random_mtp_head
from tests.support.params import slow_except

MODES = ["ar", "dflash2", "lookup", "mtp", "auto"]


def _run(target, ids, modes=MODES, **config):
    """Each mode twice on one session, and the second reply: auto has learned by then and
    changes modes (handing a root that is committed already from one strategy to another)."""
    mtp = MTPDrafter(random_mtp_head(target), target, steps=2)
    session = Session(target, OracleDrafter(target, block_size=5), mtp, reuse_prompt=True)
    out = {}
    for mode in modes:
        for _ in range(2):
            events = list(session.generate(ids, GenerationConfig(mode=mode, **config)))
        out[mode] = (events[-1], [e for e in events if isinstance(e, Tokens)])
    return out


def _parts(target, ids, reply):
    state = ReasoningState(target.thinking)
    state.advance(ids)
    return state.advance(reply)


@pytest.mark.parametrize("arch", slow_except(["qwen3", "qwen3_5"], "qwen3"))
def test_a_budget_ends_the_reasoning_at_the_same_token_in_every_mode(thinking_target, arch):
    target = thinking_target(arch, "qwen3_5")  # the generation prompt opens the block
    ids = encode_prompt(target, "Explain speculative decoding.", chat=True)
    replies = _run(target, ids, max_tokens=40, ignore_eos=True, thinking_budget=6)
    first, _ = replies["ar"]
    assert all(finished.tokens == first.tokens for finished, _ in replies.values())
    parts = _parts(target, ids, first.tokens)
    end = first.tokens.index(target.thinking.end)
    prompt_reasoning = ReasoningState(target.thinking)
    prompt_reasoning.advance(ids)
    assert prompt_reasoning.inside and prompt_reasoning.count >= 1  # the template's "\n"
    assert end == 6  # six generated reasoning tokens: the template's newline is not one
    decode = target.tokenizer.decode
    reasoning = [t for t, p in zip(first.tokens, parts, strict=True) if p is Part.REASONING]
    answer = [t for t, p in zip(first.tokens, parts, strict=True) if p is Part.ANSWER]
    assert first.reasoning == decode(reasoning) and first.text == decode(answer)
    for finished, steps in replies.values():
        assert "".join(e.reasoning for e in steps) == first.reasoning
        assert first.text.startswith("".join(e.text for e in steps))  # then the flush
        assert steps[0].part == "reasoning" and steps[-1].part == "answer"
        segments = finished.stats.segments
        assert segments["reasoning"]["tokens"] + segments["answer"]["tokens"] == len(first.tokens)
        assert segments["reasoning"]["steps"] + segments["answer"]["steps"] == finished.stats.steps


@pytest.mark.slow  # three seeds, five modes, two replies each
def test_sampled_replies_never_reason_past_the_budget(thinking_target):
    target = thinking_target("qwen3", "qwen3_5")
    ids = encode_prompt(target, "Hi", chat=True)
    for seed in range(3):
        sampling = SamplingParams(temperature=1.0, seed=seed)
        replies = _run(
            target, ids, max_tokens=24, ignore_eos=True, thinking_budget=3, sampling=sampling
        )
        for finished, _ in replies.values():
            parts = _parts(target, ids, finished.tokens)
            before_end = parts[: finished.tokens.index(target.thinking.end)]
            assert before_end.count(Part.REASONING) <= 3 and Part.ANSWER not in before_end


def test_thinking_off_renders_the_empty_block_and_the_reply_is_all_answer(thinking_target):
    target = thinking_target("qwen3", "qwen3")
    off = encode_prompt(target, "Hi", chat=True, template_kwargs={"enable_thinking": False})
    on = encode_prompt(target, "Hi", chat=True)
    assert target.tokenizer.decode(off).endswith("<think>\n\n</think>\n\n")
    assert off[: len(on)] == on and target.thinking.start not in on
    ((finished, steps),) = _run(target, off, ["ar"], max_tokens=12, ignore_eos=True).values()
    assert finished.reasoning == "" and all(e.part == "answer" for e in steps)
    assert finished.stats.segments["reasoning"]["tokens"] == 0


def test_earlier_reasoning_is_dropped_from_the_history(thinking_target):
    target = thinking_target("qwen3", "qwen3")
    history = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think>\nmulling\n</think>\n\nanswer"},
        {"role": "user", "content": "b"},
    ]
    text = target.tokenizer.decode(encode_prompt(target, history))
    assert "mulling" not in text and "answer" in text


def test_a_model_that_does_not_think_ignores_the_budget(tiny_target):
    target = tiny_target("qwen3")
    assert target.thinking is None
    config = GenerationConfig(max_tokens=10, ignore_eos=True)
    plain = list(Session(target).generate([5, 6, 7], config))[-1]
    budget = GenerationConfig(max_tokens=10, ignore_eos=True, thinking_budget=0)
    with_budget = list(Session(target).generate([5, 6, 7], budget))[-1]
    assert with_budget.tokens == plain.tokens and with_budget.stats.segments == {}
    assert with_budget.reasoning == ""


@pytest.mark.slow  # the real demo model
def test_the_demo_model_does_not_think(qwen_dir):
    from engine_mlx.api import load_target

    assert load_target(qwen_dir).thinking is None


def test_the_command_line_splits_reasoning_from_the_answer(thinking_target, capsys):
    from engine_mlx.cli import main

    target = thinking_target("qwen3", "qwen3_5")
    args = ["generate", "--model", str(target.spec.path), "--prompt", "Hi", "--max-tokens", "16"]
    assert main([*args, "--thinking-budget", "4", "--json"]) == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["reasoning"] and set(last["stats"]["segments"]) == {"reasoning", "answer"}
    assert main([*args, "--no-thinking", "--json"]) == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["reasoning"] == ""
    assert (
        main(
            [
                "generate",
                "--model",
                str(target.spec.path),
                "--prompt",
                "Hi",
                "--thinking-budget",
                "-1",
            ]
        )
        == 2
    )


def test_generate_thinking_budget_counts_generated_reasoning_only(thinking_target, capsys):
    """Issue #65: ``--thinking-budget 6`` on a template whose prompt ends in ``<think>\\n``
    gave 5 reasoning tokens; llama.cpp's --reasoning-budget counts generated ones only."""
    from engine_mlx.cli import main

    target = thinking_target("qwen3", "qwen3_5")
    args = ["generate", "--model", str(target.spec.path), "--max-tokens", "20", "--json"]
    assert main([*args, "--prompt", "Explain speculative decoding.", "--thinking-budget", "6"]) == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["tokens"].index(target.thinking.end) == 6
    assert last["stats"]["segments"]["reasoning"]["tokens"] == 6


@pytest.mark.parametrize("budget", [3, 4, 5, 6, 7])
def test_the_budget_holds_across_a_change_of_mode_at_every_step(
    thinking_target, monkeypatch, budget
):
    """Auto forced through plain decoding, DFlash2 and MTP in turn: a strategy that takes
    over holds a root the last one committed, which the forcing rule must count once."""
    from engine_mlx.auto.step_costs import StepCosts
    from engine_mlx.modes import Mode
    from tests.support.auto_driver import drive_auto

    target = thinking_target("qwen3", "qwen3_5")
    ids = encode_prompt(target, "Why is the sky blue?", chat=True)
    config = {"max_tokens": 12, "ignore_eos": True, "thinking_budget": budget}
    ((plain, _),) = _run(target, ids, ["ar"], **config).values()
    cheap = StepCosts({(n, 0): 0.05 for n in (1, 2, 4)})
    modes = (Mode.LOOKUP, Mode.AR, Mode.MTP, Mode.AR, Mode.DFLASH2, Mode.AR)
    drive_auto(monkeypatch, lambda k: cheap, lambda k, current: modes[k % len(modes)])
    ((auto, steps),) = _run(target, ids, ["auto"], **config).values()
    assert len({e.step.mode for e in steps}) >= 3
    assert auto.tokens == plain.tokens


def test_the_next_turn_reuses_the_kept_prefill_up_to_the_dropped_reasoning(thinking_target):
    """Qwen3.5-style: turn 1's prompt ends in ``<think>\\n``, which turn 2 renders without;
    everything before it is reused, and the reply is a fresh prefill's."""
    target = thinking_target("qwen3", "qwen3_5")
    history = [{"role": "user", "content": "Why is the sky blue? " * 8}]
    first_ids = encode_prompt(target, history)
    session = Session(target, reuse_prompt=True)
    config = GenerationConfig(max_tokens=10, ignore_eos=True, thinking_budget=3)
    first = list(session.generate(first_ids, config))[-1]
    history += [{"role": "assistant", "content": first.text}, {"role": "user", "content": "Why?"}]
    second_ids = encode_prompt(target, history)
    shared = next(i for i, (a, b) in enumerate(zip(first_ids, second_ids, strict=False)) if a != b)
    assert shared >= len(first_ids) - 3  # all but the opened block
    second = list(session.generate(second_ids, config))[-1]
    assert second.stats.reused_prompt_tokens == shared
    fresh = list(Session(target).generate(second_ids, config))[-1]
    assert second.tokens == fresh.tokens


def test_a_start_marker_inside_the_block_does_not_restart_the_budget():
    """A model may write ``<think>`` while reasoning (a tiny half-precision model did, sampled):
    the block stays the one that opened, so the budget still counts from its start."""
    markers = ThinkingMarkers(start=3, end=4)
    budget = ThinkingBudget(markers, budget=3, prompt=[9, 3])  # the prompt opens the block
    budget.remember([9, 3])
    budget.remember([10, 11])
    assert budget.forced([]) is None
    assert budget.forced([3]) is None  # the marker is not a reasoning token
    assert budget.forced([3, 12]) == markers.end  # 10, 11, 12: three, across the marker
    state = ReasoningState(markers)
    assert state.advance([3, 10, 3, 11, 4, 20]) == [
        Part.MARKER, Part.REASONING, Part.MARKER, Part.REASONING, Part.MARKER, Part.ANSWER,
    ]  # fmt: skip
    assert state.opened == 1 and not state.inside
