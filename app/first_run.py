"""What a window with no model shows: what is missing and two ways to get a model.

A packaged FlashChat has no source tree and no set-up step, so on a first run the library may
be empty. Instead of an error, the chat area explains it and offers the demo model with one
click (a download from the Hugging Face hub, through the model library, verified and
resumable) or a model file already on this machine (a .gguf or a model folder). The library
does the installing; the window loads the model when it arrives.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from engine_mlx.demo import DEMO
from engine_mlx.library.mac_models import mac_model_for
from engine_mlx.library.memory import physical_memory, unified_memory, usable_memory
from engine_mlx.library.units import human_bytes


def has_any_model() -> bool:
    """Whether anything can be loaded: the bundled demo (or its import) or a library model."""
    from app.widgets.model_bar import scan_library
    from engine_mlx.demo import find_gguf

    if find_gguf(DEMO) is not None or (DEMO.folder() / "config.json").is_file():
        return True
    targets, _drafters, _problems = scan_library()
    return bool(targets)


class NoModelPanel(QWidget):
    download_requested = Signal(str)  # a hub repo id
    file_chosen = Signal(str)  # a .gguf file or a model folder

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("No model installed")
        title = QLabel("<h2>No model is installed yet</h2>", self)
        text = QLabel(
            "FlashChat runs language models on this computer. Install one to start: download the "
            f"demo model ({DEMO.hub_repo}, about {DEMO.hub_size}, from Hugging Face), or choose "
            "a model you already have — a .gguf file or a Hugging Face model folder. You can "
            "also drop a file or a Hugging Face link onto this window at any time.",
            self,
        )
        text.setWordWrap(True)
        usable = usable_memory() if unified_memory() else None  # None except on a Mac
        self.mac_model = mac_model_for(usable) if usable else None
        self.mac_text = QLabel(self._mac_text(usable), self)
        self.mac_text.setAccessibleName("This Mac's memory")
        self.mac_text.setWordWrap(True)
        self.mac_text.setVisible(bool(self.mac_text.text()))
        self.mac_button: QPushButton | None = None
        if self.mac_model is not None:
            self.mac_button = QPushButton(f"Download {self.mac_model.name}", self)
            self.mac_button.setAccessibleName(f"Download {self.mac_model.name}")
            self.mac_button.clicked.connect(self._download_mac_model)
        self.download_button = QPushButton("Download the demo model", self)
        self.download_button.setAccessibleName("Download the demo model")
        self.file_button = QPushButton("Choose a model file…", self)
        self.file_button.setAccessibleName("Choose a model file")
        self.status = QLabel("", self)
        self.status.setAccessibleName("Install status")
        self.status.setWordWrap(True)
        buttons = QHBoxLayout()
        if self.mac_button is not None:
            buttons.addWidget(self.mac_button)
        buttons.addWidget(self.download_button)
        buttons.addWidget(self.file_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        for widget in (title, text, self.mac_text):
            layout.addWidget(widget)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        layout.addStretch(2)
        layout.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        self.download_button.clicked.connect(self._download)
        self.file_button.clicked.connect(self._choose)

    def _mac_text(self, usable: int | None) -> str:
        """On a Mac: its unified memory, what the GPU may use of it, and the model to run
        there instead of the demo (a small model sized for a CPU), with its sizes."""
        total = physical_memory()
        if not usable or not total:
            return ""
        text = (
            f"This Mac has {human_bytes(total)} of unified memory; its GPU can use about "
            f"{human_bytes(usable)}. "
        )
        model = self.mac_model
        if model is None:
            return text + "The demo model suits it."
        return text + (
            f"The demo is a small model sized for a CPU; for this Mac: {model.name}, "
            f"{model.repo_id}, {human_bytes(model.weight_bytes)} to download and about "
            f"{human_bytes(model.memory_bytes())} to run. Once it is in, the model library "
            f"offers its DFlash2 drafter, {model.drafter}."
        )

    def _download_mac_model(self) -> None:
        assert self.mac_model is not None
        self.status.setText("Downloading in the model library; the model loads when it is in.")
        self.download_requested.emit(self.mac_model.repo_id)

    def _download(self) -> None:
        self.status.setText("Downloading in the model library; the model loads when it is in.")
        self.download_requested.emit(DEMO.hub_repo)

    def _choose(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Choose a model file", "", "GGUF models (*.gguf);;All files (*)"
        )
        if path:
            self.status.setText("Installing in the model library; it loads when it is in.")
            self.file_chosen.emit(path)
