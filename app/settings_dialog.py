"""The settings dialog: sampling, limits, system prompt, speculation knobs and the local
server."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QPlainTextEdit,
    QSpinBox,
    QWidget,
)

from app.settings import AppSettings


class SettingsDialog(QDialog):
    def __init__(self, settings: AppSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self._settings = settings
        form = QFormLayout(self)
        self.temperature = self._double(0.0, 2.0, 0.05, settings.temperature, "Temperature")
        self.top_p = self._double(0.01, 1.0, 0.01, settings.top_p, "Top-p")
        self.top_k = self._int(0, 1000, settings.top_k, "Top-k (0: off)")
        self.repetition_penalty = self._double(
            1.0, 2.0, 0.01, settings.repetition_penalty, "Repetition penalty (1: off)"
        )
        self.repetition_penalty.setToolTip(
            "Above 1, tokens already in the conversation become less likely; small models "
            "otherwise tend to repeat themselves. Qwen2.5 recommends 1.05."
        )
        self.max_tokens = self._int(1, 32768, settings.max_tokens, "Maximum tokens")
        self.draft_width = self._int(1, 8, settings.draft_width, "Draft width")
        self.block_size = self._int(0, 64, settings.block_size, "Block size (0: the drafter's)")
        self.auto_threshold = self._int(0, 1_000_000, settings.auto_threshold, "Auto threshold")
        self.auto_threshold.setSuffix(" tokens")
        self.auto_threshold.setSpecialValueText("measured (expected speed)")
        self.auto_threshold.setToolTip(
            "Auto mode: 0 picks, every step, the mode expected fastest from its drafts and this "
            "machine's measured step costs; a number switches to plain decoding from that many "
            "context tokens on."
        )
        self.colour_draft = QCheckBox("Tint text that came from accepted draft tokens", self)
        self.colour_draft.setAccessibleName("Colour drafted tokens")
        self.colour_draft.setChecked(settings.colour_draft_tokens)
        self.loop_guard = QCheckBox("Stop a reply that keeps repeating itself", self)
        self.loop_guard.setAccessibleName("Loop guard")
        self.loop_guard.setChecked(settings.loop_guard)
        self.loop_guard.setToolTip(
            'A reply that repeats one short cycle of tokens ("0, 0, 0, …") for over a hundred '
            "tokens stops there, with a note under it, instead of running to the token limit."
        )
        self.serve = QCheckBox("Serve on localhost (an OpenAI-compatible API)", self)
        self.serve.setAccessibleName("Serve on localhost")
        self.serve.setChecked(settings.serve_enabled)
        self.serve.setToolTip(
            "Editors, agents and scripts on this machine can use the loaded model at "
            "http://127.0.0.1:PORT/v1; the chat and the server take turns."
        )
        self.serve_port = self._int(1024, 65535, settings.serve_port, "Server port")
        self.system_prompt = QPlainTextEdit(settings.system_prompt, self)
        self.system_prompt.setAccessibleName("System prompt")
        self.system_prompt.setMaximumHeight(90)
        for label, widget in (
            ("Temperature", self.temperature),
            ("Top-p", self.top_p),
            ("Top-k", self.top_k),
            ("Repetition penalty", self.repetition_penalty),
            ("Max tokens", self.max_tokens),
            ("Loops", self.loop_guard),
            ("System prompt", self.system_prompt),
            ("Draft width", self.draft_width),
            ("Block size", self.block_size),
            ("Auto threshold", self.auto_threshold),
            ("Drafted tokens", self.colour_draft),
            ("Local server", self.serve),
            ("Port", self.serve_port),
        ):
            form.addRow(label, widget)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def _double(self, lo: float, hi: float, step: float, value: float, name: str):
        box = QDoubleSpinBox(self)
        box.setRange(lo, hi)
        box.setSingleStep(step)
        box.setDecimals(2)
        box.setValue(value)
        box.setAccessibleName(name)
        return box

    def _int(self, lo: int, hi: int, value: int, name: str) -> QSpinBox:
        box = QSpinBox(self)
        box.setRange(lo, hi)
        box.setValue(value)
        box.setAccessibleName(name)
        return box

    def result_settings(self) -> AppSettings:
        return replace(
            self._settings,
            temperature=self.temperature.value(),
            top_p=self.top_p.value(),
            top_k=self.top_k.value(),
            repetition_penalty=self.repetition_penalty.value(),
            max_tokens=self.max_tokens.value(),
            loop_guard=self.loop_guard.isChecked(),
            system_prompt=self.system_prompt.toPlainText().strip(),
            draft_width=self.draft_width.value(),
            block_size=self.block_size.value(),
            auto_threshold=self.auto_threshold.value(),
            colour_draft_tokens=self.colour_draft.isChecked(),
            serve_enabled=self.serve.isChecked(),
            serve_port=self.serve_port.value(),
        )
