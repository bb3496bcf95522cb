"""The engine worker's reports to the window: a GPU kernel switched off by its first-use check
is named once in the status bar, with why."""

from __future__ import annotations

from app.engine_worker import EngineWorker
from engine_mlx.events import Finished
from engine_mlx.stats import GenerationStats


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
