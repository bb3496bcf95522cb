"""Updates arriving faster than the eye reads are coalesced: one redraw per pacing interval,
and nothing is lost on the way."""

from __future__ import annotations

import pytest

from app import stream_pacer
from app.messages import LiveUpdate
from app.stream_pacer import StreamPacer
from app.widgets.chat_view import ChatView
from app.widgets.rate_chart import RateChart
from engine_mlx.events import Tokens
from engine_mlx.modes import Mode
from engine_mlx.stats import StepStats


def _step(depth: int) -> Tokens:
    stats = StepStats(Mode.AR, committed=1, drafted=0, tested=0, accepted=0)
    return Tokens("", (1,), (False,), stats, 40.0, depth)


def test_tokens_within_one_interval_make_one_redraw(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    shown: list[LiveUpdate] = []

    def apply(update: LiveUpdate) -> None:
        shown.append(update)
        view.append_assistant(list(update.segments))

    pacer = StreamPacer(apply)
    view.start_assistant()
    redraws = view.redraws
    for i in range(50):  # 50 updates before the event loop runs again: one interval
        pacer.push(LiveUpdate(((f"w{i} ", i % 2 == 0),), _step(100 + i)))
    assert shown == [] and pacer.pending  # kept, not drawn
    qtbot.waitUntil(lambda: not pacer.pending, timeout=2000)  # the timer's flush
    assert len(shown) == 1 and view.redraws == redraws + 1
    assert view.streaming_text() == "".join(f"w{i} " for i in range(50))
    assert shown[0].latest is not None and shown[0].latest.context_depth == 149
    assert shown[0].segments[:2] == (("w0 ", True), ("w1 ", False))  # draft flags kept
    assert pacer.cost.updates == 50 and pacer.cost.flushes == 1


def test_flush_shows_everything_at_once_and_is_idempotent(qtbot) -> None:
    shown: list[LiveUpdate] = []
    pacer = StreamPacer(shown.append)
    pacer.push(LiveUpdate((("a", False),), None, reasoning="think "))
    pacer.push(LiveUpdate((("b", True),), None, reasoning="more"))
    pacer.flush()  # what the window does before it finishes a reply
    pacer.flush()
    assert shown == [LiveUpdate((("a", False), ("b", True)), None, "think more")]
    assert not pacer.pending


def _clocks(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """The pacer's two clocks, moved by hand: wall (perf_counter) and the thread's CPU."""
    clock = {"wall": 10.0, "cpu": 1.0}
    monkeypatch.setattr(stream_pacer.time, "perf_counter", lambda: clock["wall"])
    monkeypatch.setattr(stream_pacer.time, "thread_time", lambda: clock["cpu"])
    return clock


def test_a_slow_flush_pushes_the_next_one_back(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _clocks(monkeypatch)

    def slow(_update: LiveUpdate) -> None:
        clock["wall"] += 0.1  # a redraw that took 100 ms of the GUI thread's CPU
        clock["cpu"] += 0.1

    pacer = StreamPacer(slow, interval_s=0.04)
    pacer.push(LiveUpdate((("x", False),), None))
    pacer.flush()
    pacer.push(LiveUpdate((("y", False),), None))
    # The next flush waits as long again (the GUI thread at most half busy), not 40 ms.
    assert 80 < pacer._timer.remainingTime() <= 100


def test_where_the_engine_shares_the_cpu_frames_keep_to_its_share(
    qtbot, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _clocks(monkeypatch)

    def frame(_update: LiveUpdate) -> None:
        clock["wall"] += 0.003  # a 3 ms redraw
        clock["cpu"] += 0.003

    pacer = StreamPacer(frame, share=stream_pacer.CPU_SHARE)
    pacer.push(LiveUpdate((("x", False),), None))
    pacer.flush()
    # 3 ms is 2.5% of 120 ms: the next frame begins 120 ms after this one began, not
    # FRAME_S (50 ms).
    assert pacer._next_at == pytest.approx(clock["wall"] - 0.003 + 0.003 / stream_pacer.CPU_SHARE)
    # The paints and handlers between frames count too: 7 ms more of the thread's CPU
    # before the next flush make 10 ms since the last frame, 400 ms at 2.5% (and SLOWEST_S
    # at most) from this frame's start.
    clock["wall"] += 0.2
    clock["cpu"] += 0.007
    pacer.push(LiveUpdate((("y", False),), None))
    pacer.flush()
    assert pacer._next_at == pytest.approx(clock["wall"] - 0.003 + stream_pacer.SLOWEST_S)
    # After an idle gap only the frame's own CPU counts: a quiet thread draws at once.
    clock["wall"] += 10.0
    clock["cpu"] += 0.5  # whatever the window did meanwhile
    pacer.push(LiveUpdate((("z", False),), None))
    pacer.flush()
    assert pacer._next_at == pytest.approx(clock["wall"] - 0.003 + 0.003 / stream_pacer.CPU_SHARE)


def test_the_chart_redraws_at_its_own_slower_pace(qtbot) -> None:
    chart = RateChart()
    qtbot.addWidget(chart)
    for k in range(20):
        chart.add_point(1.0 + k * 0.04, 30.0 + k)
    assert chart.repaint_timer.isActive()  # one redraw is due, for all twenty points
    assert chart.repaint_timer.interval() >= 200
    assert len(chart.points()) == 20
