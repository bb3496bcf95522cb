"""One download, copy or import in the library window: its progress, speed and what is left,
then installed, stopped (resumable or not) or failed, with the buttons that fit."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from engine_mlx.library.units import human_bytes, human_duration

PHASES = {
    "downloading": "Downloading",
    "verifying": "Verifying",
    "copying": "Copying",
    "importing": "Importing",
    "installing": "Installing",
    "installed": "Installed",
}


class DownloadRow(QFrame):
    """One install: what, how far, how fast, and its Cancel / Resume / Discard buttons."""

    cancel_requested = Signal(str)
    resume_requested = Signal(str)
    discard_requested = Signal(str)
    dismiss_requested = Signal(str)

    def __init__(self, job: str, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.job = job
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAccessibleName(f"Download {title}")
        self.title = QLabel(f"<b>{title}</b>", self)
        self.status = QLabel("Checking…", self)
        self.status.setAccessibleName("Download status")
        self.status.setWordWrap(True)
        self.bar = QProgressBar(self)
        self.bar.setAccessibleName("Download progress")
        self.bar.setRange(0, 0)  # busy until the size is known
        self.detail = QLabel("", self)
        self.detail.setAccessibleName("Download detail")
        self.detail.setStyleSheet("color: palette(mid);")
        self.cancel_button = QPushButton("Cancel", self)
        self.resume_button = QPushButton("Resume", self)
        self.discard_button = QPushButton("Discard", self)
        self.discard_button.setToolTip("Delete what was downloaded")
        self.dismiss_button = QPushButton("Dismiss", self)
        self.dismiss_button.setToolTip("Remove this line (the model stays installed)")
        for button in (self.resume_button, self.discard_button, self.dismiss_button):
            button.hide()
        self.cancel_button.clicked.connect(lambda: self.cancel_requested.emit(self.job))
        self.resume_button.clicked.connect(lambda: self.resume_requested.emit(self.job))
        self.discard_button.clicked.connect(lambda: self.discard_requested.emit(self.job))
        self.dismiss_button.clicked.connect(lambda: self.dismiss_requested.emit(self.job))
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        buttons = (self.cancel_button, self.resume_button, self.discard_button, self.dismiss_button)
        for button in buttons:
            top.addWidget(button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.addLayout(top)
        layout.addWidget(self.bar)
        layout.addWidget(self.status)
        layout.addWidget(self.detail)

    def set_plan(self, plan: dict) -> None:
        self.status.setText(plan.get("summary", ""))

    def set_progress(self, p: dict) -> None:
        phase = PHASES.get(p["phase"], p["phase"])
        total = int(p["total"]) or 1
        self.bar.setRange(0, 1000)
        self.bar.setValue(int(1000 * min(int(p["done"]) / total, 1.0)))
        if p["phase"] == "importing":
            self.bar.setFormat(f"{phase} %p%")
            self.status.setText(f"{phase} tensors: {p['done']} of {p['total']}")
            return
        self.bar.setFormat(f"{phase} %p%")
        speed = float(p.get("speed_bps") or 0.0)
        parts = [f"{human_bytes(p['done'])} of {human_bytes(p['total'])}"]
        if p["phase"] in ("downloading", "copying") and speed > 0:
            parts.append(f"{human_bytes(speed)}/s")
            parts.append(f"{human_duration(p.get('eta_s'))} left")
        self.status.setText(" · ".join(parts))
        number = min(int(p["files_done"]) + 1, int(p["files_total"]))
        file_line = f"{phase} {p['file']} ({number} of {p['files_total']})"
        if int(p["file_size"]) > 0 and p["phase"] == "downloading":
            file_line += f": {human_bytes(p['file_done'])} of {human_bytes(p['file_size'])}"
        self.detail.setText(file_line)

    def set_installed(self, path: str) -> None:
        self.bar.setRange(0, 1)
        self.bar.setValue(1)
        self.bar.setFormat("Installed")
        self.status.setText(f"Installed in {path}")
        self.detail.setText("")
        self.cancel_button.hide()
        self.resume_button.hide()
        self.discard_button.hide()
        self.dismiss_button.show()

    def set_stopped(self, message: str, resumable: bool, failed: bool) -> None:
        if self.bar.maximum() == 0:
            self.bar.setRange(0, 1)
            self.bar.setValue(0)
        self.bar.setFormat("Failed" if failed else "Stopped")
        self.status.setText(message)
        if failed:
            self.status.setStyleSheet("color: #c0392b;")
        self.cancel_button.hide()
        self.resume_button.setVisible(resumable)
        self.discard_button.setVisible(resumable)
        self.dismiss_button.setVisible(not resumable)

    def set_resuming(self) -> None:
        self.status.setStyleSheet("")
        self.status.setText("Resuming…")
        self.bar.setFormat("%p%")
        self.cancel_button.show()
        self.resume_button.hide()
        self.discard_button.hide()
