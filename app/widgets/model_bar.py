"""The model picker: target, DFlash drafter and MTP head, showing what is really loaded.

Choices come from the library's own listing (``catalog.list_installed``): the models and
drafters that would load; one the library marks as broken is shown there, with the reason,
not offered here. "Library…" opens the model library; "Connect…" adds a model on a remote
OpenAI-compatible server, listed after the local ones ("NAME @ HOST"). Nothing changes until
the worker reports the model loaded; until then the bar says "Loading…".
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QWidget

from app.messages import ModelInfo
from app.widgets.eliding_combo import ElidingComboBox
from engine_mlx.companions import NO_DRAFTER
from engine_mlx.library.catalog import list_installed
from engine_mlx.remote import PREFIX as REMOTE_PREFIX
from engine_mlx.remote import Endpoint


def scan_library(root: Path | None = None) -> tuple[list[Path], list[Path], list[str]]:
    """(targets, drafters) of the library that would load, and a line for each installed
    folder that would not (name: reason)."""
    models = list_installed(root)
    usable = [m for m in models if not m.problem]
    targets = [m.path for m in usable if m.kind == "target"]
    drafters = [m.path for m in usable if m.kind == "drafter"]
    return targets, drafters, [f"{m.name}: {m.problem}" for m in models if m.problem]


class ModelBar(QWidget):
    load_requested = Signal(str, str)  # target path, drafter path ("" = none)
    library_requested = Signal()  # open the model library
    connect_requested = Signal()  # add a model on a remote server

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.remote_specs: list[str] = []  # saved remote models (``remote.Endpoint`` specs)
        # The boxes share what room the window has and shorten names in the middle, so the
        # bar fits a 1,024-pixel window and shows whole names in a wider one.
        self.target_box = ElidingComboBox(self)
        self.target_box.setAccessibleName("Model")
        self.drafter_box = ElidingComboBox(self)
        self.drafter_box.setAccessibleName("DFlash drafter")
        self.mtp_box = ElidingComboBox(self)
        self.mtp_box.setAccessibleName("MTP head")
        self.mtp_box.addItem("none")
        self.mtp_box.setEnabled(False)
        self.status = QLabel("Loading…", self)
        self.status.setAccessibleName("Model status")
        # A long name or address must not widen the window past the screen: the label
        # shrinks (its tooltip keeps the whole text).
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.status.setMinimumWidth(60)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for label, box, chars, stretch in (
            ("Model", self.target_box, 8, 3),
            ("Drafter", self.drafter_box, 8, 3),
            ("MTP", self.mtp_box, 8, 0),
        ):
            box.setSizeAdjustPolicy(
                ElidingComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
            )
            box.setMinimumContentsLength(chars)
            layout.addWidget(QLabel(label, self))
            layout.addWidget(box, stretch)
        layout.addWidget(self.status, 1)
        self.library_button = QPushButton("Library…", self)
        self.library_button.setAccessibleName("Model library")
        self.library_button.clicked.connect(self.library_requested)
        layout.addWidget(self.library_button)
        self.connect_button = QPushButton("Connect…", self)
        self.connect_button.setAccessibleName("Connect to a server")
        self.connect_button.setToolTip(
            "Use a model on another machine: any OpenAI-compatible server (FlashChat's "
            "`serve`, LM Studio, Ollama, llama.cpp, vLLM, SGLang)."
        )
        self.connect_button.clicked.connect(self.connect_requested)
        layout.addWidget(self.connect_button)
        self.refresh()
        self.target_box.activated.connect(self._request)
        self.drafter_box.activated.connect(self._request)

    def refresh(self, extra_target: str = "", extra_drafter: str = "") -> None:
        targets, drafters, problems = scan_library()
        self._show_library_problems(problems)
        paths = [str(p) for p in targets]
        remote = extra_target.startswith(REMOTE_PREFIX)
        if extra_target and not remote and extra_target not in paths:
            paths.insert(0, extra_target)
        self.target_box.clear()
        for path in paths:
            self.target_box.addItem(Path(path).name, path)
        specs = list(self.remote_specs)
        if remote and extra_target not in specs:
            specs.append(extra_target)
        for spec in specs:
            self.target_box.addItem(Endpoint.from_spec(spec).label, spec)
        dpaths = [str(p) for p in drafters]
        if extra_drafter and extra_drafter != NO_DRAFTER and extra_drafter not in dpaths:
            dpaths.insert(0, extra_drafter)
        self.drafter_box.clear()
        self.drafter_box.addItem("No drafter", NO_DRAFTER)  # even where one is shipped
        for path in dpaths:
            self.drafter_box.addItem(Path(path).name, path)

    def _show_library_problems(self, problems: list[str]) -> None:
        """A broken model in the library is named on the Library button, so it is noticed
        and removed there, instead of silently missing from the list."""
        self.library_button.setText(
            f"Library… ({len(problems)} will not load)" if problems else "Library…"
        )
        tip = (
            "Installed models, downloads and pairings. Drop a Hugging Face link, a model folder "
            "or a .gguf file onto the window to add one."
        )
        if problems:
            tip += "\n\nWill not load (open the Library to remove):\n" + "\n".join(problems)
        self.library_button.setToolTip(tip)

    def _request(self, *_: object) -> None:
        self.set_status("Loading…")
        self.load_requested.emit(
            self.target_box.currentData() or "", self.drafter_box.currentData() or ""
        )

    def show_loaded(self, info: ModelInfo) -> None:
        """Select what the worker actually loaded."""
        self.refresh(info.path, info.drafter_path)
        index = self.target_box.findData(info.path)
        if index >= 0:
            self.target_box.setCurrentIndex(index)
        dindex = self.drafter_box.findData(info.drafter_path)
        self.drafter_box.setCurrentIndex(max(0, dindex))
        self.mtp_box.clear()
        if info.mtp:
            self.mtp_box.addItem(info.mtp.removesuffix(" head"))  # "shipped", "built-in"
            self.mtp_box.setToolTip(f"Multi-token-prediction head loaded: {info.mtp}")
        else:
            self.mtp_box.addItem("none")
            self.mtp_box.setToolTip(f"MTP unavailable: {info.mtp_reason}")
        remote = info.path.startswith(REMOTE_PREFIX)
        self.drafter_box.setEnabled(not remote)  # the server drafts (or not) on its own
        where = "remote" if remote else f"context {info.max_context:,}"
        self.set_status("")  # loaded: the boxes name it, the context meter sizes it
        self.target_box.setToolTip(f"{info.name} · {where}\n{info.backend_detail}")

    def set_status(self, text: str) -> None:
        """A word while nothing usable is loaded ("Loading…", "No model installed"); hidden
        otherwise, so the boxes get its room."""
        self.status.setText(text)
        self.status.setVisible(bool(text))
