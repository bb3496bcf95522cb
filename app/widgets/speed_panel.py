"""The live speed panel: the right-hand column that makes speculative decoding visible.

It is fed plain numbers by the window (of the engine it imports only the MLX-free ``modes``),
so it can be driven by a script in tests and stays responsive however the engine reports
progress.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from PySide6.QtCore import QSize, Qt, QTimer, Signal, Slot
from PySide6.QtGui import (
    QFont,
    QPalette,
)
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.widgets.panel_widgets import ContextGauge, NoticeLabel, ToggleSwitch
from app.widgets.rate_chart import RateChart
from engine_mlx.events import ModeSwitch
from engine_mlx.modes import Mode
from engine_mlx.modes import mode_label as mode_name

TAU_TOOLTIP = "tokens committed per verification step, bonus token included (plain decoding: 1.0)"
ACCEPTANCE_TOOLTIP = (
    "accepted draft tokens / draft tokens tested; tested counts the draft positions on the path "
    "the verifier walked, up to and including the first rejection"
)
NO_VALUE = "–"

SMOOTHING_S = 0.5  # time constant of the big number's moving average
# The numbers are redrawn at most this often while a reply streams: a number is read, not
# watched, and each redraw of the panel repaints its labels, the gauge and what lies under
# them (on 2 cores, time taken from decoding). The chart keeps every report.
NUMBERS_S = 0.25


def _format_rate(rate: float | None) -> str:
    return NO_VALUE if rate is None or not math.isfinite(rate) else f"{rate:.1f}"


def _format_acceptance(acceptance: float | None) -> str:
    if acceptance is None or not math.isfinite(acceptance):
        return NO_VALUE
    return f"{acceptance * 100:.0f}%"


def _format_tau(tau: float | None) -> str:
    return NO_VALUE if tau is None or not math.isfinite(tau) else f"{tau:.2f}"


def _set_text(label: QLabel, text: str) -> None:
    """Skip unchanged text: ~30 updates a second should not relayout labels that did not change."""
    if label.text() != text:
        label.setText(text)


def _muted(widget: QWidget) -> None:
    """Secondary text uses the palette's placeholder role, so it follows light/dark themes."""
    widget.setForegroundRole(QPalette.ColorRole.PlaceholderText)


class SpeedPanel(QWidget):
    """Live decode speed, speculation quality, context depth and mode controls.

    Each user action emits exactly one signal, from its own control: the switch emits
    ``auto_toggled``, the combo emits ``forced_mode_changed``; the other control follows
    silently (picking a mode turns the switch off; picking "Auto" or switching auto on selects
    "Auto"; switching auto off pins the mode running now, readable via ``forced_mode()``).
    ``set_auto`` / ``set_forced_mode`` update the controls without emitting anything, so the
    window can mirror engine state without signal loops.
    """

    auto_toggled = Signal(bool)
    forced_mode_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Speed panel")
        self._modes: list[str] = []
        self._mode = ""
        self._max_context = 0
        self._depth = 0
        self._last_t: float | None = None
        self._smoothed: float | None = None
        self._smooth_t: float | None = None
        self._finished_rates: dict[str, float] = {}
        self._syncing = False
        self._numbers: tuple[float, float | None, int] | None = None  # tau, acceptance, depth
        self._numbers_at = -math.inf  # report time of the last numbers shown
        self._numbers_timer = QTimer(self)  # shows the latest numbers when they are due
        self._numbers_timer.setSingleShot(True)
        self._numbers_timer.setInterval(round(NUMBERS_S * 1000))
        self._numbers_timer.timeout.connect(self.show_numbers)
        self._build_ui()
        self.reset()

    # --- layout -----------------------------------------------------------------------------

    def _label(self, name: str, text: str = "", muted: bool = False) -> QLabel:
        label = QLabel(text, self)
        label.setAccessibleName(name)
        if muted:
            _muted(label)
        return label

    def _build_ui(self) -> None:
        root = QVBoxLayout(self)
        root.setContentsMargins(10, 10, 10, 10)
        root.setSpacing(8)

        # big live rate
        self.rate_caption = self._label("Decode speed caption", "Decode speed", muted=True)
        self.rate_label = self._label("Decode speed", NO_VALUE)
        big = QFont(self.font())
        big.setPointSizeF(self.font().pointSizeF() * 2.6)
        big.setBold(True)
        self.rate_label.setFont(big)
        self.rate_unit = self._label("Decode speed unit", "tok/s", muted=True)
        rate_row = QHBoxLayout()
        rate_row.setSpacing(6)
        rate_row.addWidget(self.rate_label, 0, Qt.AlignmentFlag.AlignBaseline)
        rate_row.addWidget(self.rate_unit, 0, Qt.AlignmentFlag.AlignBaseline)
        rate_row.addStretch(1)
        root.addWidget(self.rate_caption)
        root.addLayout(rate_row)

        self.chart = RateChart(self)
        root.addWidget(self.chart)

        # acceptance and tau
        stats = QGridLayout()
        stats.setHorizontalSpacing(12)
        stats.setVerticalSpacing(0)
        self.acceptance_caption = self._label("Acceptance rate caption", "Acceptance", muted=True)
        self.acceptance_label = self._label("Acceptance rate", NO_VALUE)
        self.tau_caption = self._label("Tokens per step caption", "τ tokens / step", muted=True)
        self.tau_label = self._label("Tokens per step (tau)", NO_VALUE)
        value_font = QFont(self.font())
        value_font.setPointSizeF(self.font().pointSizeF() * 1.35)
        value_font.setBold(True)
        for widget in (self.acceptance_caption, self.acceptance_label):
            widget.setToolTip(ACCEPTANCE_TOOLTIP)
        for widget in (self.tau_caption, self.tau_label):
            widget.setToolTip(TAU_TOOLTIP)
        self.acceptance_label.setFont(value_font)
        self.tau_label.setFont(value_font)
        stats.addWidget(self.acceptance_caption, 0, 0)
        stats.addWidget(self.tau_caption, 0, 1)
        stats.addWidget(self.acceptance_label, 1, 0)
        stats.addWidget(self.tau_label, 1, 1)
        stats.setColumnStretch(0, 1)
        stats.setColumnStretch(1, 1)
        root.addLayout(stats)

        # context depth
        context_row = QHBoxLayout()
        self.context_caption = self._label("Context depth caption", "Context", muted=True)
        self.context_label = self._label("Context depth", NO_VALUE)
        context_row.addWidget(self.context_caption)
        context_row.addStretch(1)
        context_row.addWidget(self.context_label)
        self.context_gauge = ContextGauge(self)
        root.addLayout(context_row)
        root.addWidget(self.context_gauge)
        root.addSpacing(2)

        # mode and its controls
        mode_row = QHBoxLayout()
        self.mode_caption = self._label("Current mode caption", "Mode", muted=True)
        self.mode_label = self._label("Current mode", NO_VALUE)
        mode_font = QFont(self.font())
        mode_font.setBold(True)
        self.mode_label.setFont(mode_font)
        # A thinking model's reply: which part is decoding (its reasoning or its answer).
        self.part_label = self._label("Part decoding", "", muted=True)
        self.part_label.hide()
        mode_row.addWidget(self.mode_caption)
        mode_row.addStretch(1)
        mode_row.addWidget(self.part_label)
        mode_row.addWidget(self.mode_label)
        root.addLayout(mode_row)

        controls = QHBoxLayout()
        controls.setSpacing(8)
        self.auto_switch = ToggleSwitch("Auto", self)
        self.auto_switch.setAccessibleName("Auto mode")
        self.auto_switch.setToolTip("Let the engine pick the decoding mode by context depth")
        self.auto_switch.setChecked(True)
        self.mode_combo = QComboBox(self)
        self.mode_combo.setAccessibleName("Decoding mode")
        self.mode_combo.setToolTip("Force one decoding mode, or leave the choice to Auto")
        self.mode_combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.mode_combo.addItem(Mode.AUTO.label, Mode.AUTO.value)
        controls.addWidget(self.auto_switch)
        controls.addWidget(self.mode_combo, 1)
        root.addLayout(controls)

        self.reason_label = self._label("Last mode switch", muted=True)
        self.reason_label.setWordWrap(True)
        root.addWidget(self.reason_label)

        self.notice_label = NoticeLabel(self)
        self.notice_label.setAccessibleName("Speculation notice")
        root.addWidget(self.notice_label)

        self.summary_label = self._label("Last generation", muted=True)
        self.summary_label.setWordWrap(True)
        root.addWidget(self.summary_label)
        root.addStretch(1)

        self.auto_switch.toggled.connect(self._on_switch_toggled)
        self.mode_combo.currentIndexChanged.connect(self._on_combo_changed)

    def sizeHint(self) -> QSize:
        return QSize(300, super().sizeHint().height())

    # --- configuration ----------------------------------------------------------------------

    def set_available_modes(self, modes: list[str]) -> None:
        """Fill the forced-mode combo ("Auto" first), keeping the selection where possible.

        A forced mode that is no longer offered falls back to Auto silently: the window chose
        the list, so it already knows.
        """
        self._modes = list(modes)
        current = self.forced_mode()
        self._syncing = True
        try:
            self.mode_combo.clear()
            self.mode_combo.addItem(Mode.AUTO.label, Mode.AUTO.value)
            for mode in self._modes:
                self.mode_combo.addItem(mode_name(mode), mode)
            index = self.mode_combo.findData(current)
            self.mode_combo.setCurrentIndex(max(index, 0))
            if index < 0 and not self.auto_switch.isChecked():
                self.auto_switch.setChecked(True)
        finally:
            self._syncing = False
        self._update_notice()

    def set_max_context(self, max_context: int) -> None:
        self._max_context = max(0, int(max_context))
        self._set_context(self._depth)

    def set_auto(self, enabled: bool) -> None:
        """Reflect the engine's auto setting without emitting ``auto_toggled``."""
        self._syncing = True
        try:
            self.auto_switch.setChecked(enabled)
            self._follow_switch(enabled)
        finally:
            self._syncing = False

    def set_forced_mode(self, mode: str) -> None:
        """Reflect a forced mode ("auto" or a mode id) without emitting ``forced_mode_changed``."""
        self._syncing = True
        try:
            index = self.mode_combo.findData(mode)
            if index >= 0:
                self.mode_combo.setCurrentIndex(index)
                self.auto_switch.setChecked(mode == Mode.AUTO)
        finally:
            self._syncing = False

    def forced_mode(self) -> str:
        """Either "auto" or the mode id the combo shows."""
        data = self.mode_combo.currentData()
        return data if isinstance(data, str) else Mode.AUTO

    # --- user interaction -------------------------------------------------------------------

    @Slot(bool)
    def _on_switch_toggled(self, checked: bool) -> None:
        if self._syncing:
            return
        self._syncing = True
        try:
            self._follow_switch(checked)
        finally:
            self._syncing = False
        self.auto_toggled.emit(checked)

    def _follow_switch(self, checked: bool) -> None:
        if checked:
            self.mode_combo.setCurrentIndex(0)
        elif self.forced_mode() == Mode.AUTO and self.mode_combo.count() > 1:
            index = self.mode_combo.findData(self._mode)
            self.mode_combo.setCurrentIndex(index if index > 0 else 1)

    @Slot(int)
    def _on_combo_changed(self, index: int) -> None:
        if self._syncing or index < 0:
            return
        mode = self.forced_mode()
        self._syncing = True
        try:
            self.auto_switch.setChecked(mode == Mode.AUTO)
        finally:
            self._syncing = False
        self.forced_mode_changed.emit(mode)

    # --- live feed --------------------------------------------------------------------------

    def generation_started(self, prompt_tokens: int, mode: str, now: float | None = None) -> None:
        """A new line on the chart; the rate restarts its smoothing (prefill is not decode)."""
        t = time.monotonic() if now is None else now
        self._last_t = t
        self._numbers, self._numbers_at = None, -math.inf
        self._numbers_timer.stop()
        self._smoothed = None
        self._smooth_t = None
        self.chart.begin_series(t)
        _set_text(self.rate_label, NO_VALUE)
        _set_text(self.acceptance_label, NO_VALUE)
        _set_text(self.tau_label, NO_VALUE)
        self._set_mode(mode)
        self._set_context(prompt_tokens)

    def update_live(
        self,
        tokens_per_s: float,
        context_depth: int,
        tau: float,
        acceptance: float | None,
        mode: str,
        now: float | None = None,
    ) -> None:
        """One progress report (~30 per second); the big number is a time-based average. The
        chart takes every report; the numbers are drawn at most every ``NUMBERS_S``."""
        t = time.monotonic() if now is None else now
        self._last_t = t
        if math.isfinite(tokens_per_s):
            if self._smoothed is None or self._smooth_t is None:
                self._smoothed = tokens_per_s
            else:
                dt = max(0.0, t - self._smooth_t)
                alpha = 1.0 - math.exp(-dt / SMOOTHING_S)
                self._smoothed += alpha * (tokens_per_s - self._smoothed)
            self._smooth_t = t
            self.chart.add_point(t, tokens_per_s)
        self._numbers = (tau, acceptance, context_depth)
        if mode and mode != self._mode:
            self._set_mode(mode)
        if t - self._numbers_at >= NUMBERS_S:
            self.show_numbers()
        elif not self._numbers_timer.isActive():
            self._numbers_timer.start()

    @Slot()
    def show_numbers(self) -> None:
        """Draw the latest report's numbers now (the timer calls it when they are due)."""
        self._numbers_timer.stop()
        if self._numbers is None:
            return
        tau, acceptance, depth = self._numbers
        self._numbers, self._numbers_at = None, self._last_t or 0.0
        _set_text(self.rate_label, _format_rate(self._smoothed))
        _set_text(self.tau_label, _format_tau(tau))
        _set_text(self.acceptance_label, _format_acceptance(acceptance))
        self._set_context(depth)

    @Slot(object)
    def show_mode_switch(self, event: ModeSwitch) -> None:
        self.mode_switched(event.from_mode, event.to_mode, event.reason)

    def mode_switched(
        self, from_mode: str, to_mode: str, reason: str, now: float | None = None
    ) -> None:
        """Mark the chart and say why, so a speed change is never a mystery."""
        if now is not None:
            t = now
        elif self._last_t is not None:
            t = self._last_t  # the latest report is at most a frame old
        else:
            t = time.monotonic()
        self._last_t = t
        self.chart.add_marker(t, mode_name(to_mode))
        self._set_mode(to_mode)
        why = reason.strip()
        text = f"Switched {mode_name(from_mode)} → {mode_name(to_mode)}"
        _set_text(self.reason_label, f"{text}: {why}" if why else text)

    def generation_finished(self, stats: Mapping[str, Any]) -> None:
        """Show the measured totals and remember the rate for the slower-than-plain check."""
        self.show_numbers()  # the last live ones first: the totals below overwrite them
        tps = stats.get("decode_tps")
        tps = float(tps) if isinstance(tps, int | float) and math.isfinite(tps) else None
        if tps is not None:
            _set_text(self.rate_label, _format_rate(tps))
        if "tau" in stats:
            _set_text(self.tau_label, _format_tau(stats.get("tau")))
        if "acceptance_rate" in stats:
            _set_text(self.acceptance_label, _format_acceptance(stats.get("acceptance_rate")))
        if stats.get("max_context"):
            self._max_context = int(stats["max_context"])
        if stats.get("context_depth") is not None:
            self._set_context(int(stats["context_depth"]))
        else:
            self._set_context(self._depth)

        modes: Mapping[str, int] = stats.get("modes") or {}
        dominant = max(modes, key=lambda m: modes[m]) if modes else self._mode
        if dominant and tps is not None:
            self._finished_rates[dominant] = tps
        self._update_notice()

        parts = []
        if stats.get("generated_tokens") is not None:
            parts.append(f"{int(stats['generated_tokens']):,} tokens")
        if stats.get("ttft_s") is not None:
            parts.append(f"first token {float(stats['ttft_s']):.2f} s")
        if tps is not None:
            parts.append(f"{tps:.1f} tok/s")
        _set_text(self.summary_label, "Last reply: " + " · ".join(parts) if parts else "")
        self.summary_label.setVisible(bool(parts))

    def reset(self) -> None:
        """Forget everything measured (new model or conversation); keeps modes and settings."""
        self._mode = ""
        self._depth = 0
        self._last_t = None
        self._smoothed = None
        self._smooth_t = None
        self._numbers, self._numbers_at = None, -math.inf
        self._numbers_timer.stop()
        self._finished_rates.clear()
        self.chart.clear()
        _set_text(self.rate_label, NO_VALUE)
        _set_text(self.acceptance_label, NO_VALUE)
        _set_text(self.tau_label, NO_VALUE)
        _set_text(self.mode_label, NO_VALUE)
        _set_text(self.reason_label, "No mode switch yet")
        self.summary_label.clear()
        self.summary_label.hide()
        self._set_context(0)
        self._update_notice()

    # --- helpers ----------------------------------------------------------------------------

    def set_part(self, part: str) -> None:
        """ "reasoning" or "answer" while a thinking model decodes; "" hides the mark."""
        text = {"reasoning": "thinking ·", "answer": "answering ·"}.get(part, "")
        _set_text(self.part_label, text)
        self.part_label.setVisible(bool(text))

    def _set_mode(self, mode: str) -> None:
        self._mode = mode
        _set_text(self.mode_label, mode_name(mode) if mode else NO_VALUE)

    def _set_context(self, depth: int) -> None:
        self._depth = max(0, int(depth))
        self.context_gauge.set_values(self._depth, self._max_context)
        maximum = f"{self._max_context:,}" if self._max_context else NO_VALUE
        _set_text(self.context_label, f"{self._depth:,} / {maximum}")

    def _update_notice(self) -> None:
        plain = self._finished_rates.get(Mode.AR)
        lines = []
        if plain is not None:
            order = [m for m in self._modes if m in self._finished_rates]
            order += [m for m in self._finished_rates if m not in order]
            for mode in order:
                rate = self._finished_rates[mode]
                if mode != Mode.AR and rate < plain:
                    lines.append(
                        f"{mode_name(mode)} measured {rate:.1f} tok/s, plain decoding "
                        f"{plain:.1f} — speculation is not paying here"
                    )
        _set_text(self.notice_label, "\n".join(lines))
        if self.notice_label.isHidden() == bool(lines):
            self.notice_label.setVisible(bool(lines))
