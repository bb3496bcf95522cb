"""The model library window: downloads in progress, installed models and how they pair.

Reached from the model bar ("Library…"), and opened by itself when something is dropped or
pasted onto the main window, so the person sees the download they started. It lists what is
installed (architecture, size, quantization, context, where it came from), whether each
drafter and MTP head fits each target (with the reason when not, the loader's own words), the
z-lab drafters that would fit an installed Qwen target, and unfinished downloads to resume.

The listing reads configs and file headers only (milliseconds, on the GUI thread); installs
run on the LibraryWorker's thread and report back through its signals.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QMimeData, Qt, Signal, Slot
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.download_worker import LibraryWorker
from app.widgets.download_row import DownloadRow
from engine_mlx.errors import EngineError
from engine_mlx.library.catalog import (
    InstalledModel,
    list_installed,
    pairings,
    remove_model,
    suggestions,
)
from engine_mlx.library.hub import endpoint_hosts
from engine_mlx.library.pending import PendingDownload, discard_pending, pending_downloads
from engine_mlx.library.sources import HubSource, Source, SourceError, parse_drop
from engine_mlx.library.units import human_bytes
from engine_mlx.paths import models_dir

COLUMNS = ("Name", "Kind", "Architecture", "Size", "Quantization", "Context", "Pairs with")
KIND_NAMES = {"target": "model", "drafter": "DFlash drafter", "mtp": "MTP head"}


def source_from_mime(mime: QMimeData, extra_hosts: Iterable[str] = ()) -> Source:
    """What a drop or paste names: local files first, then web links, then text."""
    urls = mime.urls() if mime.hasUrls() else []
    paths = [Path(u.toLocalFile()) for u in urls if u.isLocalFile()]
    links = [u.toString() for u in urls if not u.isLocalFile()]
    text = mime.text() if mime.hasText() else ""
    return parse_drop(paths, links, text, extra_hosts)


class LibraryView(QDialog):
    """Non-modal: downloads keep going, and the chat stays usable, while it is open."""

    request_install = Signal(str, object)  # job id, Source (to the worker)
    library_changed = Signal()  # something was installed or removed
    load_requested = Signal(str, str)  # target folder, drafter folder ("" = none)

    def __init__(self, worker: LibraryWorker, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Model library")
        self.setAcceptDrops(True)
        self.resize(900, 620)
        self.worker = worker
        self.root = worker.root
        self.jobs: dict[str, tuple[DownloadRow, Source]] = {}
        self.plans: dict[str, dict] = {}
        self.pending: dict[str, PendingDownload] = {}
        self.models: list[InstalledModel] = []
        self._build()
        self.request_install.connect(worker.install)
        worker.planned.connect(self._on_planned)
        worker.progress.connect(self._on_progress)
        worker.installed.connect(self._on_installed)
        worker.failed.connect(self._on_failed)
        worker.cancelled.connect(self._on_cancelled)
        self.refresh()

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        self.input = QLineEdit(self)
        self.input.setAccessibleName("Model to add")
        self.input.setPlaceholderText(
            "ORG/NAME or https://huggingface.co/… — or drop a model folder, .gguf or "
            ".safetensors file here"
        )
        self.add_button = QPushButton("Add", self)
        self.add_button.setDefault(True)
        self.error = QLabel(self)
        self.error.setAccessibleName("Library error")
        self.error.setWordWrap(True)
        self.error.setStyleSheet(
            "QLabel { color: #ffffff; background: #c0392b; padding: 6px; border-radius: 4px; }"
        )
        self.error.hide()
        self.where = QLabel(self)
        self.where.setStyleSheet("color: palette(mid);")

        self.downloads_box = QGroupBox("Downloads", self)
        self.downloads_layout = QVBoxLayout(self.downloads_box)
        self.downloads_box.hide()

        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setAccessibleName("Installed models")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        # Rows follow their text as columns and the dialog change width (wrapped pairings).
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.setWordWrap(True)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.suggestions_box = QGroupBox("Suggested drafters", self)
        self.suggestions_layout = QVBoxLayout(self.suggestions_box)
        self.suggestions_box.hide()

        self.load_button = QPushButton("Load in chat", self)
        self.remove_button = QPushButton("Remove…", self)
        self.refresh_button = QPushButton("Refresh", self)
        self.load_button.setEnabled(False)
        self.remove_button.setEnabled(False)

        add_row = QHBoxLayout()
        add_row.addWidget(self.input, 1)
        add_row.addWidget(self.add_button)
        buttons = QHBoxLayout()
        buttons.addWidget(self.where, 1)
        buttons.addWidget(self.refresh_button)
        buttons.addWidget(self.remove_button)
        buttons.addWidget(self.load_button)
        layout = QVBoxLayout(self)
        layout.addLayout(add_row)
        layout.addWidget(self.error)
        layout.addWidget(self.downloads_box)
        layout.addWidget(QLabel("<b>Installed</b>", self))
        layout.addWidget(self.table, 1)
        layout.addWidget(self.suggestions_box)
        layout.addLayout(buttons)

        self.add_button.clicked.connect(self.add_from_input)
        self.input.returnPressed.connect(self.add_from_input)
        self.refresh_button.clicked.connect(self.refresh)
        self.remove_button.clicked.connect(self.remove_selected)
        self.load_button.clicked.connect(self.load_selected)
        self.table.itemSelectionChanged.connect(self._on_selection)

    # ------------------------------------------------------------------ listing
    @Slot()
    def refresh(self) -> None:
        root = self.root or models_dir()
        self.models = list_installed(root)
        pairs = pairings(self.models)
        self.table.setRowCount(len(self.models))
        for row, m in enumerate(self.models):
            pairs_text = self._pairs_text(m, pairs)
            if m.problem:
                pairs_text = f"Will not load: {m.problem}"
            cells = (
                m.name,
                KIND_NAMES.get(m.kind, m.kind),
                m.architecture,
                human_bytes(m.size_bytes),
                m.quantization,
                f"{m.max_context:,}" if m.max_context else "–",
                pairs_text,
            )
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(f"{m.source}\n{m.path}" if col == 0 else text)
                if m.problem:
                    item.setForeground(Qt.GlobalColor.red)
                self.table.setItem(row, col, item)
        self._show_suggestions()
        self._show_pending()
        shown = str(root)
        home = str(Path.home())
        if shown.startswith(home + "/"):
            shown = "~" + shown[len(home) :]
        self.where.setText(f"{shown} · {human_bytes(self._free_space(root))} free")
        self._on_selection()

    @staticmethod
    def _pairs_text(model: InstalledModel, pairs: list) -> str:
        """A target: the drafters and MTP heads that fit it; a drafter or head: the targets
        it fits. Then what does not fit, and why."""
        fits, misfits = [], []
        for p in pairs:
            if model.name == p.target:
                label = "MTP " + p.companion if p.kind == "mtp" else f"drafter {p.companion}"
                if p.companion == "built-in MTP head":
                    label = "MTP built-in"
            elif model.name == p.companion:
                label = p.target
            else:
                continue
            (fits if p.fits else misfits).append(label if p.fits else f"{label}: {p.reason}")
        text = ", ".join(fits) or "–"
        if misfits:
            text += "  ·  does not fit " + "; ".join(misfits)
        return text

    @staticmethod
    def _free_space(root: Path) -> int:
        probe = root
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        return shutil.disk_usage(probe).free

    def pairing_text(self, name: str) -> str:
        """The "Pairs with" cell of model ``name`` (for tests and accessibility)."""
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).text() == name:
                return self.table.item(row, len(COLUMNS) - 1).text()
        raise KeyError(name)

    def _show_suggestions(self) -> None:
        while self.suggestions_layout.count():
            widget = self.suggestions_layout.takeAt(0).widget()
            if widget is not None:
                widget.deleteLater()
        wanted = [
            s
            for s in suggestions(self.models)
            if not any(
                isinstance(src, HubSource) and src.repo_id == s.repo_id
                for _, src in self.jobs.values()
            )
        ]
        for s in wanted:
            line = QWidget(self.suggestions_box)
            row = QHBoxLayout(line)
            row.setContentsMargins(0, 0, 0, 0)
            label = QLabel(f"For <b>{s.target}</b>: {s.repo_id} — {s.reason}", line)
            label.setWordWrap(True)
            button = QPushButton("Download", line)
            button.setAccessibleName(f"Download {s.repo_id}")
            button.clicked.connect(lambda _=False, repo=s.repo_id: self.start(HubSource(repo)))
            row.addWidget(label, 1)
            row.addWidget(button)
            self.suggestions_layout.addWidget(line)
        self.suggestions_box.setVisible(bool(wanted))

    def _show_pending(self) -> None:
        """Unfinished downloads found on disk (a cancel, a crash, a restart) become rows
        with Resume and Discard, unless a job of this session already shows them."""
        shown = {src.repo_id for _, src in self.jobs.values() if isinstance(src, HubSource)} | {
            p.repo_id for p in self.pending.values()
        }
        for pending in pending_downloads(self.root):
            if pending.repo_id in shown:
                continue
            job = f"pending:{pending.path.name}"
            row = self._add_row(job, pending.repo_id, HubSource(pending.repo_id, pending.commit))
            self.pending[job] = pending
            total = pending.total or 1
            row.bar.setRange(0, 1000)
            row.bar.setValue(int(1000 * pending.bytes_on_disk / total))
            row.set_stopped(
                f"Unfinished: {human_bytes(pending.bytes_on_disk)} of "
                f"{human_bytes(pending.total)} downloaded.",
                resumable=True,
                failed=False,
            )

    # ------------------------------------------------------------------ starting jobs
    def start(self, source: Source) -> str:
        """Begin installing ``source`` (queued behind any install in progress)."""
        self.error.hide()
        job = self.worker.new_job()
        self._add_row(job, source.describe(), source)
        self.request_install.emit(job, source)
        self._show_suggestions()
        return job

    def _add_row(self, job: str, title: str, source: Source) -> DownloadRow:
        row = DownloadRow(job, title, self.downloads_box)
        row.cancel_requested.connect(self.cancel)
        row.resume_requested.connect(self.resume)
        row.discard_requested.connect(self.discard)
        row.dismiss_requested.connect(self.dismiss)
        self.downloads_layout.addWidget(row)
        self.downloads_box.show()
        self.jobs[job] = (row, source)
        return row

    def row(self, job: str) -> DownloadRow:
        return self.jobs[job][0]

    def show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.show()

    @Slot()
    def add_from_input(self) -> None:
        text = self.input.text()
        try:
            source = parse_drop([], [], text, endpoint_hosts())
        except SourceError as exc:
            self.show_error(str(exc))
            return
        self.input.clear()
        self.start(source)

    def add_from_mime(self, mime: QMimeData) -> str | None:
        """Start installing what a drop or paste names; show why not when it names nothing
        installable. Returns the job id."""
        try:
            source = source_from_mime(mime, endpoint_hosts())
        except SourceError as exc:
            self.show_error(str(exc))
            return None
        return self.start(source)

    @Slot(str)
    def cancel(self, job: str) -> None:
        self.worker.cancel(job)
        self.row(job).status.setText("Cancelling…")

    @Slot(str)
    def resume(self, job: str) -> None:
        row, source = self.jobs.pop(job)
        plan = self.plans.pop(job, None)
        if isinstance(source, HubSource) and plan:
            source = replace(source, revision=plan["commit"])  # the kept files' commit
        self.pending.pop(job, None)
        new_job = self.worker.new_job()
        row.job = new_job
        row.set_resuming()
        self.jobs[new_job] = (row, source)
        self.request_install.emit(new_job, source)

    @Slot(str)
    def discard(self, job: str) -> None:
        row, source = self.jobs.pop(job)
        pending = self.pending.pop(job, None)
        if pending is None and isinstance(source, HubSource):
            pending = next(
                (p for p in pending_downloads(self.root) if p.repo_id == source.repo_id), None
            )
        if pending is not None:
            discard_pending(pending)
        row.deleteLater()
        self.downloads_box.setVisible(len(self.jobs) > 0)
        self.refresh()

    @Slot(str)
    def dismiss(self, job: str) -> None:
        row, _ = self.jobs.pop(job)
        self.plans.pop(job, None)
        row.deleteLater()
        self.downloads_box.setVisible(len(self.jobs) > 0)

    # ------------------------------------------------------------------ worker events
    @Slot(str, dict)
    def _on_planned(self, job: str, plan: dict) -> None:
        if job in self.jobs:
            self.plans[job] = plan
            self.row(job).set_plan(plan)

    @Slot(str, dict)
    def _on_progress(self, job: str, progress: dict) -> None:
        if job in self.jobs:
            self.row(job).set_progress(progress)

    @Slot(str, str)
    def _on_installed(self, job: str, path: str) -> None:
        if job in self.jobs:
            self.row(job).set_installed(path)
        self.refresh()
        self.library_changed.emit()

    @Slot(str, str)
    def _on_failed(self, job: str, message: str) -> None:
        if job in self.jobs:
            source = self.jobs[job][1]
            self.row(job).set_stopped(message, isinstance(source, HubSource), failed=True)

    @Slot(str, str)
    def _on_cancelled(self, job: str, message: str) -> None:
        if job in self.jobs:
            source = self.jobs[job][1]
            self.row(job).set_stopped(message, isinstance(source, HubSource), failed=False)

    # ------------------------------------------------------------------ installed models
    def selected(self) -> InstalledModel | None:
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        return self.models[rows[0].row()] if rows else None

    def select(self, name: str) -> None:
        for row, m in enumerate(self.models):
            if m.name == name:
                self.table.selectRow(row)
                return
        raise KeyError(name)

    @Slot()
    def _on_selection(self) -> None:
        model = self.selected()
        self.remove_button.setEnabled(model is not None)
        self.load_button.setEnabled(model is not None and model.kind == "target")

    @Slot()
    def remove_selected(self) -> None:
        model = self.selected()
        if model is None:
            return
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Remove model",
            f"Delete {model.name} ({human_bytes(model.size_bytes)}) from the library?\n\n"
            f"{model.path}\n\nThis cannot be undone.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            self,
        )
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        self.confirm_box = box
        if box.exec() != QMessageBox.StandardButton.Yes:
            return
        try:
            remove_model(model.path, self.root or models_dir())
        except (EngineError, OSError) as exc:
            self.show_error(f"Could not remove {model.name}: {exc}")
        self.refresh()
        self.library_changed.emit()

    @Slot()
    def load_selected(self) -> None:
        """Load the selected model in the chat, with the first installed drafter that fits."""
        model = self.selected()
        if model is None or model.kind != "target":
            return
        drafter = next(
            (
                p.companion
                for p in pairings(self.models)
                if p.target == model.name and p.kind == "drafter" and p.fits
            ),
            "",
        )
        paths = {m.name: str(m.path) for m in self.models}
        self.load_requested.emit(str(model.path), paths.get(drafter, ""))

    # ------------------------------------------------------------------ drops onto the window
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls() or event.mimeData().hasText():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        if self.add_from_mime(event.mimeData()) is not None:
            event.acceptProposedAction()
