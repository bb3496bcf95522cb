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


def test_a_slow_flush_pushes_the_next_one_back(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [10.0]
    monkeypatch.setattr(stream_pacer.time, "perf_counter", lambda: now[0])

    def slow(_update: LiveUpdate) -> None:
        now[0] += 0.2  # a redraw that took 200 ms

    pacer = StreamPacer(slow, interval_s=0.04)
    pacer.push(LiveUpdate((("x", False),), None))
    pacer.flush()
    pacer.push(LiveUpdate((("y", False),), None))
    # The next flush waits as long again (the GUI thread at most half busy), not 40 ms.
    assert pacer._timer.remainingTime() > 150  # 400 ms after it began, 200 ms from now


def test_the_chart_redraws_at_its_own_slower_pace(qtbot) -> None:
    chart = RateChart()
    qtbot.addWidget(chart)
    for k in range(20):
        chart.add_point(1.0 + k * 0.04, 30.0 + k)
    assert chart.repaint_timer.isActive()  # one redraw is due, for all twenty points
    assert chart.repaint_timer.interval() >= 200
    assert len(chart.points()) == 20
