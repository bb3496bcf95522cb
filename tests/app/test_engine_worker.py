"""The engine worker's reports to the window: a GPU kernel switched off by its first-use check
is named once in the status bar, with why; text is sent no faster than the window draws it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app import engine_worker
from app.engine_worker import UPDATE_INTERVAL_S, EngineWorker
from engine_mlx.events import Finished, Tokens
from engine_mlx.modes import Mode
from engine_mlx.stats import GenerationStats, StepStats


def _finished(switched_off: dict[str, str]) -> Finished:
    kernels = {"path": "metal", "calls": {}, "switched_off": switched_off} if switched_off else {}
    stats = GenerationStats(
        prompt_tokens=3, generated_tokens=2, steps=2, tau=1.0, acceptance_rate=None,
        decode_tps=10.0, prefill_tps=10.0, ttft_s=0.1, total_s=0.3, context_depth=5,
        max_context=64, drafted=0, tested=0, accepted=0, kernels=kernels,
    )  # fmt: skip
    return Finished(reason="eos", text="ok", tokens=(1, 2), stats=stats)


def test_a_switched_off_kernel_is_named_once(qapp):
    worker = EngineWorker()
    notices: list[str] = []
    worker.notice.connect(notices.append)
    worker._stream(iter([_finished({})]))
    assert notices == []
    why = "the kernel disagreed with its reference on its first call"
    worker._stream(iter([_finished({"tree_attention": why})]))
    assert len(notices) == 1 and "tree attention" in notices[0] and why in notices[0]
    worker._stream(iter([_finished({"tree_attention": why})]))  # the next reply: said already
    assert len(notices) == 1
    worker._stream(iter([_finished({"tree_attention": why, "acceptance": "failed"})]))
    assert len(notices) == 2 and "acceptance: failed" in notices[1]
    assert "tree attention" not in notices[1]


def test_text_is_sent_at_the_pace_the_window_asks(qapp, monkeypatch: pytest.MonkeyPatch):
    clock = [0.0]

    def tick() -> float:
        clock[0] += 0.1  # a step every 100 ms
        return clock[0]

    monkeypatch.setattr(engine_worker.time, "perf_counter", tick)
    step = StepStats(Mode.AR, committed=1, drafted=0, tested=0, accepted=0)
    steps = [
        Tokens(f"t{i} ", (i,), (False,), step, 10.0, i, segments=((f"t{i} ", False),))
        for i in range(12)
    ]
    reply = "".join(f"t{i} " for i in range(12))
    worker = EngineWorker()
    sent: list[str] = []
    worker.segments.connect(lambda update: sent.append("".join(t for t, _ in update.segments)))
    worker._stream(iter(steps))
    assert len(sent) == 12  # ~30 a second at most: every 100 ms step is sent
    sent.clear()
    worker.pace_updates(0.35)  # the window draws every 350 ms
    worker._stream(iter([*steps, replace(_finished({}), text=reply)]))
    assert len(sent) == 4  # steps 0, 4 and 8, then the rest with the end
    assert "".join(sent) == reply
    worker.pace_updates(0.0)  # never faster than the worker's own pace
    assert worker.update_interval_s == UPDATE_INTERVAL_S
