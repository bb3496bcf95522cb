"""The speed panel, driven by a scripted generation with explicit timestamps."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage, QPalette
from PySide6.QtWidgets import QCheckBox, QComboBox, QLabel

from app.widgets.panel_widgets import AMBER, RED
from app.widgets.rate_chart import MARKER
from app.widgets.speed_panel import ACCEPTANCE_TOOLTIP, NUMBERS_S, TAU_TOOLTIP, SpeedPanel

MODES = ["ar", "lookup", "dflash2", "mtp"]
FRAME = 1 / 30
REASON = "Context passed 6,000 tokens: drafting costs more than it saves at this depth"


@pytest.fixture
def panel(qtbot) -> Iterator[SpeedPanel]:
    widget = SpeedPanel()
    qtbot.addWidget(widget)
    widget.set_available_modes(MODES)
    widget.set_max_context(8192)
    widget.resize(300, 760)
    widget.show()
    qtbot.waitExposed(widget)
    yield widget


def drive(
    panel: SpeedPanel,
    start: float,
    stop: float,
    rate: float,
    mode: str,
    depth: tuple[int, int],
    tau: float = 1.0,
    acceptance: float | None = None,
) -> float:
    """Feed ~30 reports a second from ``start`` to ``stop``; returns the last timestamp."""
    steps = round((stop - start) / FRAME)
    t = start
    for i in range(steps + 1):
        t = start + i * FRAME
        used = depth[0] + (depth[1] - depth[0]) * i // max(steps, 1)
        panel.update_live(rate, used, tau, acceptance, mode, now=t)
    panel.show_numbers()  # what the panel's timer does within NUMBERS_S
    return t


def test_numbers_are_drawn_four_times_a_second_and_the_last_one_arrives(panel, qtbot) -> None:
    """30 reports a second, each a token deeper: the numbers change at most every
    ``NUMBERS_S`` (the chart takes every report), and the timer shows the last report's."""
    panel.generation_started(100, "ar", now=0.0)
    shown = []
    for i in range(60):  # two seconds of reports
        panel.update_live(20.0 + i % 3, 101 + i, 1.0, None, "ar", now=0.5 + i * FRAME)
        shown.append(panel.context_label.text())
    changes = sum(a != b for a, b in itertools.pairwise(shown))
    assert 2 / NUMBERS_S - 2 <= changes <= 2 / NUMBERS_S + 1
    assert len(panel.chart.points()) > 2 * changes
    qtbot.waitUntil(lambda: panel.context_label.text() == "160 / 8,192", timeout=2000)


def finished_stats(tps: float, modes: dict[str, int], **extra: object) -> dict[str, object]:
    stats: dict[str, object] = {
        "decode_tps": tps,
        "tau": 1.0,
        "acceptance_rate": None,
        "generated_tokens": sum(modes.values()),
        "ttft_s": 0.25,
        "context_depth": 4000,
        "max_context": 8192,
        "modes": modes,
    }
    stats.update(extra)
    return stats


def test_scripted_generation(panel: SpeedPanel) -> None:
    highlight = panel.palette().color(QPalette.ColorRole.Highlight)
    panel.generation_started(3000, "dflash2", now=100.0)
    assert panel.mode_label.text() == "DFlash2"
    assert panel.context_label.text() == "3,000 / 8,192"
    assert panel.rate_label.text() == "–"
    assert panel.context_gauge.level() == "ok"
    assert panel.context_gauge.bar_color() == highlight

    t = drive(panel, 100.5, 110.5, 24.0, "dflash2", (3000, 6000), tau=3.2, acceptance=0.55)
    assert panel.context_label.text() == "6,000 / 8,192"
    assert panel.rate_label.text() == "24.0"
    assert panel.tau_label.text() == "3.20"
    assert panel.acceptance_label.text() == "55%"

    # A burst: six chunks committed within 5 ms take no room on the time axis.
    before = len(panel.chart.points())
    for k in range(1, 7):
        panel.update_live(24.0, 6000 + k * 4, 3.2, 0.55, "dflash2", now=t + k * 0.001)
    assert len(panel.chart.points()) <= before + 1  # merged, not six spikes side by side
    assert max(v for _, v in panel.chart.points()) == pytest.approx(24.0)
    assert panel.rate_label.text() == "24.0"

    panel.mode_switched("dflash2", "ar", REASON)
    assert panel.mode_label.text() == "Plain"
    assert REASON in panel.reason_label.text()
    assert panel.reason_label.wordWrap()
    assert panel.chart.markers() == [(pytest.approx(t + 0.006), "Plain")]

    t = drive(panel, t + 0.05, t + 4.0, 12.0, "ar", (6024, 6600))
    assert panel.rate_label.text() == "12.0"
    assert panel.tau_label.text() == "1.00"
    assert panel.acceptance_label.text() == "–"
    assert panel.context_gauge.level() == "warning"
    assert panel.context_gauge.bar_color() == AMBER
    t = drive(panel, t + FRAME, t + 10.0, 12.0, "ar", (6600, 7900))
    assert panel.context_label.text() == "7,900 / 8,192"
    assert panel.context_gauge.level() == "critical"
    assert panel.context_gauge.bar_color() == RED

    latest = panel.chart.latest()
    assert latest == pytest.approx(t)
    assert all(ts >= latest - 30.0 for ts, _ in panel.chart.points())
    assert len(panel.chart.series()) == 1
    assert [label for _, label in panel.chart.markers()] == ["Plain"]

    panel.generation_finished(
        finished_stats(
            15.3, {"dflash2": 120, "ar": 200}, tau=2.4, acceptance_rate=0.5, context_depth=7900
        )
    )
    assert panel.rate_label.text() == "15.3"
    assert panel.tau_label.text() == "2.40"
    assert panel.acceptance_label.text() == "50%"
    assert panel.notice_label.isHidden()
    assert "320 tokens" in panel.summary_label.text()


def test_chart_keeps_only_the_last_30_seconds(panel: SpeedPanel) -> None:
    panel.generation_started(100, "ar", now=0.0)
    drive(panel, 0.1, 10.0, 10.0, "ar", (100, 200))
    panel.mode_switched("ar", "lookup", "Reply repeats the prompt", now=10.0)
    drive(panel, 10.1, 20.0, 20.0, "lookup", (200, 400))
    panel.generation_finished(finished_stats(15.0, {"ar": 100, "lookup": 120}))

    panel.generation_started(400, "dflash2", now=25.0)
    drive(panel, 25.5, 45.0, 30.0, "dflash2", (400, 900))
    panel.mode_switched("dflash2", "ar", "Deep context", now=45.0)
    last = drive(panel, 45.1, 60.0, 11.0, "ar", (900, 1000))

    points = panel.chart.points()
    assert min(t for t, _ in points) >= last - 30.0
    assert min(t for t, _ in points) == pytest.approx(last - 30.0, abs=0.05)
    assert panel.chart.markers() == [(45.0, "Plain")]  # the 10 s "Prompt lookup" one aged out
    assert len(panel.chart.series()) == 1  # the first generation left the window entirely

    # Roughly 30 reports a second for 30 s, not the ~1,800 fed in all.
    assert 850 <= len(points) <= 920


def test_bursts_do_not_move_the_smoothed_rate(panel: SpeedPanel) -> None:
    panel.generation_started(10, "dflash2", now=0.0)
    drive(panel, 0.1, 3.0, 20.0, "dflash2", (10, 100), tau=2.0, acceptance=0.5)
    # One chunk's instantaneous rate would read 96 tok/s; it lands within 2 ms of the last.
    panel.update_live(96.0, 104, 2.0, 0.5, "dflash2", now=3.002)
    assert float(panel.rate_label.text()) == pytest.approx(20.0, abs=0.5)
    drive(panel, 3.1, 6.0, 30.0, "dflash2", (104, 200))
    assert float(panel.rate_label.text()) == pytest.approx(30.0, abs=0.1)


def test_real_clock_when_no_timestamp_is_given(panel: SpeedPanel) -> None:
    panel.generation_started(10, "ar")
    panel.update_live(8.0, 12, 1.0, None, "ar")
    panel.mode_switched("ar", "lookup", "Reply repeats the prompt")
    assert panel.chart.points()
    assert panel.chart.markers()[0][1] == "Prompt lookup"


def test_tooltips_say_what_is_counted(panel: SpeedPanel) -> None:
    tau = "tokens committed per verification step, bonus token included (plain decoding: 1.0)"
    acceptance = (
        "accepted draft tokens / draft tokens tested; tested counts the draft positions on the "
        "path the verifier walked, up to and including the first rejection"
    )
    assert tau == TAU_TOOLTIP
    assert acceptance == ACCEPTANCE_TOOLTIP
    assert panel.tau_label.toolTip() == tau
    assert panel.tau_caption.toolTip() == tau
    assert panel.acceptance_label.toolTip() == acceptance
    assert panel.acceptance_caption.toolTip() == acceptance


@pytest.mark.parametrize(
    ("used", "level"),
    [(0, "ok"), (8000, "ok"), (8001, "warning"), (9500, "warning"), (9501, "critical")],
)
def test_context_gauge_thresholds(panel: SpeedPanel, used: int, level: str) -> None:
    panel.set_max_context(10_000)
    panel.generation_started(used, "ar", now=0.0)
    colours = {
        "ok": panel.palette().color(QPalette.ColorRole.Highlight),
        "warning": AMBER,
        "critical": RED,
    }
    assert panel.context_gauge.level() == level
    assert panel.context_gauge.bar_color() == colours[level]
    assert panel.context_gauge.value() == used
    assert panel.context_gauge.maximum() == 10_000
    assert panel.context_label.text() == f"{used:,} / 10,000"


def test_context_numbers_are_grouped(panel: SpeedPanel) -> None:
    panel.generation_started(3412, "ar", now=0.0)
    assert panel.context_label.text() == "3,412 / 8,192"
    assert "3,412 of 8,192" in panel.context_gauge.accessibleDescription()


def test_slower_than_plain_notice(panel: SpeedPanel) -> None:
    assert panel.notice_label.isHidden()
    panel.generation_finished(finished_stats(7.9, {"dflash2": 90, "ar": 10}))
    assert panel.notice_label.isHidden()  # nothing to compare with yet

    panel.generation_finished(finished_stats(11.2, {"ar": 64}))
    assert not panel.notice_label.isHidden()
    assert panel.notice_label.text() == (
        "DFlash2 measured 7.9 tok/s, plain decoding 11.2 — speculation is not paying here"
    )

    panel.generation_finished(finished_stats(14.0, {"dflash2": 80, "lookup": 20}))
    assert panel.notice_label.isHidden()  # DFlash2's latest run beats plain now

    panel.generation_finished(finished_stats(9.0, {"lookup": 50, "ar": 5}))
    assert not panel.notice_label.isHidden()
    assert panel.notice_label.text().startswith("Prompt lookup measured 9.0 tok/s")

    panel.generation_finished(finished_stats(8.5, {"ar": 40}))
    assert panel.notice_label.isHidden()  # plain got slower than both


def test_user_interaction_emits_and_programmatic_changes_do_not(qtbot, panel: SpeedPanel) -> None:
    assert panel.auto_switch.isChecked()
    assert panel.forced_mode() == "auto"

    with (
        qtbot.waitSignal(panel.auto_toggled, timeout=1000) as toggled,
        qtbot.assertNotEmitted(panel.forced_mode_changed),
    ):
        qtbot.mouseClick(panel.auto_switch, Qt.MouseButton.LeftButton)
    assert toggled.args == [False]
    assert panel.forced_mode() != "auto"  # switching auto off pins a concrete mode

    with (
        qtbot.waitSignal(panel.forced_mode_changed, timeout=1000) as chosen,
        qtbot.assertNotEmitted(panel.auto_toggled),
    ):
        panel.mode_combo.setCurrentIndex(panel.mode_combo.findData("dflash2"))
    assert chosen.args == ["dflash2"]
    assert not panel.auto_switch.isChecked()

    with (
        qtbot.waitSignal(panel.forced_mode_changed, timeout=1000) as chosen,
        qtbot.assertNotEmitted(panel.auto_toggled),
    ):
        panel.mode_combo.setCurrentIndex(0)
    assert chosen.args == ["auto"]
    assert panel.auto_switch.isChecked()

    with (
        qtbot.assertNotEmitted(panel.auto_toggled),
        qtbot.assertNotEmitted(panel.forced_mode_changed),
    ):
        panel.set_auto(False)
        assert not panel.auto_switch.isChecked()
        panel.set_forced_mode("lookup")
        assert panel.forced_mode() == "lookup"
        assert panel.mode_combo.currentText() == "Prompt lookup"
        panel.set_forced_mode("auto")
        assert panel.auto_switch.isChecked()
        panel.set_auto(False)
        panel.set_auto(True)
        assert panel.forced_mode() == "auto"
        panel.set_available_modes(["ar", "dflash2"])

    with qtbot.waitSignal(panel.auto_toggled, timeout=1000) as toggled:
        qtbot.mouseClick(panel.auto_switch, Qt.MouseButton.LeftButton)
    assert toggled.args == [False]


def test_combo_lists_human_mode_names(panel: SpeedPanel) -> None:
    combo = panel.mode_combo
    assert [combo.itemText(i) for i in range(combo.count())] == [
        "Auto",
        "Plain",
        "Prompt lookup",
        "DFlash2",
        "MTP",
    ]
    assert [combo.itemData(i) for i in range(combo.count())] == ["auto", *MODES]
    panel.generation_started(10, "mtp", now=0.0)
    assert panel.mode_label.text() == "MTP"
    panel.update_live(5.0, 12, 1.8, 0.4, "lookup", now=0.5)
    assert panel.mode_label.text() == "Prompt lookup"


def test_every_control_and_value_has_an_accessible_name(panel: SpeedPanel) -> None:
    assert panel.auto_switch.accessibleName() == "Auto mode"
    assert panel.mode_combo.accessibleName() == "Decoding mode"
    widgets = [
        *panel.findChildren(QLabel),
        *panel.findChildren(QComboBox),
        *panel.findChildren(QCheckBox),
        panel.chart,
        panel.context_gauge,
    ]
    missing = [type(w).__name__ for w in widgets if not w.accessibleName()]
    assert not missing
    names = {w.accessibleName() for w in widgets}
    assert len(names) == len(widgets)


def test_reset_forgets_measurements(panel: SpeedPanel) -> None:
    panel.generation_started(100, "dflash2", now=0.0)
    drive(panel, 0.1, 2.0, 20.0, "dflash2", (100, 200), tau=3.0, acceptance=0.6)
    panel.mode_switched("dflash2", "ar", "Deep context", now=2.0)
    panel.generation_finished(finished_stats(5.0, {"dflash2": 100}))
    panel.generation_finished(finished_stats(10.0, {"ar": 100}))
    assert not panel.notice_label.isHidden()

    panel.reset()
    assert panel.rate_label.text() == "–"
    assert panel.acceptance_label.text() == "–"
    assert panel.mode_label.text() == "–"
    assert panel.context_label.text() == "0 / 8,192"
    assert panel.chart.points() == []
    assert panel.chart.markers() == []
    assert panel.notice_label.isHidden()
    panel.generation_finished(finished_stats(5.0, {"dflash2": 100}))
    assert panel.notice_label.isHidden()  # plain decoding's rate was forgotten too
    assert panel.mode_combo.count() == 1 + len(MODES)  # configuration survives


def _dominant_colour(image: QImage, step: int = 3) -> QColor:
    counts: Counter[int] = Counter()
    for y in range(0, image.height(), step):
        for x in range(0, image.width(), step):
            counts[image.pixel(x, y)] += 1
    return QColor.fromRgb(counts.most_common(1)[0][0])


def test_follows_a_dark_palette(qtbot, panel: SpeedPanel) -> None:
    palette = QPalette(panel.palette())
    dark = {
        QPalette.ColorRole.Window: QColor("#2b2b2b"),
        QPalette.ColorRole.WindowText: QColor("#e6e6e6"),
        QPalette.ColorRole.Base: QColor("#1e1e1e"),
        QPalette.ColorRole.Text: QColor("#e6e6e6"),
        QPalette.ColorRole.PlaceholderText: QColor("#9a9a9a"),
    }
    for role, colour in dark.items():
        palette.setColor(role, colour)
    panel.setPalette(palette)
    panel.generation_started(100, "ar", now=0.0)
    drive(panel, 0.1, 5.0, 12.0, "ar", (100, 160))
    chart = panel.chart.grab().toImage()
    assert _dominant_colour(chart).name() == "#1e1e1e"  # the plot uses Base, not white
    gauge = panel.context_gauge.grab().toImage()
    assert QColor(gauge.pixel(gauge.width() - 2, gauge.height() // 2)).lightness() < 128


def test_screenshot_with_data(panel: SpeedPanel, tmp_path: Path) -> None:
    panel.generation_started(900, "ar", now=0.0)
    drive(panel, 0.3, 8.0, 11.2, "ar", (900, 990))
    panel.generation_finished(finished_stats(11.2, {"ar": 90}, context_depth=990))
    panel.generation_started(3000, "dflash2", now=10.0)
    t = drive(panel, 10.4, 22.0, 25.0, "dflash2", (3000, 6300), tau=3.1, acceptance=0.62)
    panel.mode_switched("dflash2", "ar", REASON)
    t = drive(panel, t + FRAME, 36.0, 12.0, "ar", (6300, 7600))
    panel.mode_switched("ar", "lookup", "Reply repeats the prompt")
    drive(panel, t + FRAME, 39.0, 22.0, "lookup", (7600, 7960), tau=2.4, acceptance=0.4)
    panel.generation_finished(
        finished_stats(7.9, {"dflash2": 900, "ar": 600}, tau=2.1, acceptance_rate=0.48)
    )
    assert not panel.notice_label.isHidden()

    path = tmp_path / "speed_panel.png"
    image = panel.grab()
    assert image.save(str(path))
    assert (image.width(), image.height()) == (300, 760)

    # Every visible child fits the 300 px column; the chart shows both switch markers.
    for child in panel.findChildren(QLabel):
        if child.isVisible():
            assert child.geometry().right() <= panel.width()
    assert [label for _, label in panel.chart.markers()] == ["Plain", "Prompt lookup"]
    chart = panel.chart.grab().toImage()
    marker_pixels = sum(
        1
        for y in range(chart.height())
        for x in range(chart.width())
        if _near(QColor(chart.pixel(x, y)), MARKER)
    )
    assert marker_pixels > 50


def _near(colour: QColor, target: QColor, tolerance: int = 40) -> bool:
    """Antialiased lines blend with the background, so compare colours loosely."""
    return all(
        abs(a - b) <= tolerance
        for a, b in zip(colour.getRgb()[:3], target.getRgb()[:3], strict=True)
    )
