"""FlashChat's main window: conversations | chat | live speed panel.

The window owns the conversation store (GUI thread) and talks to the engine only through the
worker on its QThread: requests go out as queued signals, results come back as signals.
Models are added by dropping (or pasting, outside the prompt) a Hugging Face link, ORG/NAME,
a model folder, a .gguf or MTP .safetensors files onto the window: the model library opens
and installs it on its own worker thread.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

from PySide6.QtCore import QByteArray, QEvent, QObject, Qt, QThread, Signal, Slot
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QGuiApplication,
    QIcon,
    QKeySequence,
    QShortcut,
)
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.ask_mode import OVERRIDES, AskAndQuit
from app.connect_dialog import ConnectDialog
from app.download_worker import LibraryWorker
from app.engine_worker import EngineWorker
from app.first_run import NoModelPanel, has_any_model
from app.history_file import default_database_path, move_aside
from app.history_transfer import HistoryTransfer
from app.local_server import LocalServer
from app.messages import LiveUpdate, ModelInfo
from app.remote_models import saved_remote_models
from app.settings import AppSettings, load_settings, save_settings
from app.settings_dialog import SettingsDialog
from app.storage import ConversationStore, StorageError
from app.widgets.banners import ErrorBanner, StorageBanner
from app.widgets.chat_view import ChatView
from app.widgets.conversation_list import ConversationList
from app.widgets.library_view import LibraryView, source_from_mime
from app.widgets.model_bar import ModelBar
from app.widgets.speed_panel import SpeedPanel
from engine_mlx.events import Finished, ModeSwitch, Started, Tokens
from engine_mlx.library.hub import endpoint_hosts
from engine_mlx.library.sources import SourceError, parse_drop
from engine_mlx.modes import Mode, fallback
from engine_mlx.version import version


def reply_record(model: ModelInfo | None, settings: dict) -> dict:
    """What a reply was asked of, kept with its statistics (and so in exports): the model,
    its companions, the requested mode and the sampling."""
    sampling = ("temperature", "top_p", "top_k", "repetition_penalty", "max_tokens")
    return {
        "model": model.name if model else "",
        "drafter": model.drafter if model else "",
        "mtp_head": model.mtp if model else "",
        "requested_mode": str(settings.get("mode", "")),
        "sampling": {key: settings[key] for key in sampling if key in settings},
    }


ICON = Path(__file__).resolve().parents[1] / "resources" / "icons" / "flashchat.svg"
CONTEXT_WARNING = 0.9  # warn when the conversation fills this share of the context


class MainWindow(QMainWindow):
    request_load = Signal(str, str)
    request_generate = Signal(list, dict)

    def __init__(
        self, model_path: str = "", drafter_path: str = "", db_path: Path | None = None
    ) -> None:
        super().__init__()
        self.setWindowTitle("FlashChat")
        if ICON.is_file():
            self.setWindowIcon(QIcon(str(ICON)))
        self.db_path = db_path or default_database_path()
        self.store, self.settings = self._open_store()
        self.conversation_id: int | None = None
        self.max_context = 0
        self.generating = False
        self.available_modes: list[str] = []
        self.first_run: NoModelPanel | None = None
        self._overrides: dict = {}  # generation settings not saved (``ask_and_quit``)
        self._loaded: ModelInfo | None = None
        self._reply_record: dict = {}  # what the reply being generated was asked of (stats)
        self._backend_summary = ""  # the status bar's resting message once a model is loaded
        self._build_ui()
        if self.store.is_temporary:
            self._show_storage_problem(self._store_problem)
        self._start_worker()
        self._start_library()
        if self.settings.window_geometry:
            self.restoreGeometry(QByteArray.fromBase64(self.settings.window_geometry.encode()))
        else:
            self.resize(1280, 800)
        if not model_path and not has_any_model():
            self._show_first_run()
        else:
            self.model_bar.set_status("Loading model…")
            self.request_load.emit(model_path, drafter_path)

    # ---------------------------------------------------------------- history file
    def _open_store(self) -> tuple[ConversationStore, AppSettings]:
        """The history file and its settings; when the file cannot be used, a store in
        memory (the window works, nothing is saved) and the reason, shown in the window."""
        self._store_problem = ""
        try:
            store = ConversationStore(self.db_path)
        except StorageError as exc:
            self._store_problem = str(exc)
            store = ConversationStore.temporary()
        try:
            return store, load_settings(store)
        except StorageError as exc:
            self._store_problem = self._store_problem or str(exc)
            return store, AppSettings()

    def _show_storage_problem(self, message: str) -> None:
        """What is wrong with the history file, and (when it could not be opened) the way
        out: move it aside and start a fresh one."""
        unusable = self.store.is_temporary
        if unusable:
            message += "\nUntil then, chats in this window are not saved."
        self.storage_banner.show_problem(message, unusable)

    @contextmanager
    def _storage(self) -> Iterator[None]:
        """Runs a step that reads or writes the history; a StorageError is shown in the
        window instead of ending the step's caller."""
        try:
            yield
        except StorageError as exc:
            self._show_storage_problem(str(exc))

    @Slot(object)
    def _on_storage_failed(self, exc: StorageError) -> None:
        self._show_storage_problem(str(exc))

    @Slot()
    def start_fresh_history(self) -> None:
        """Move the unusable history file aside (nothing is deleted) and start a new one."""
        if self.generating:
            return
        try:
            aside = move_aside(self.db_path)
            store = ConversationStore(self.db_path)
            save_settings(store, self.settings)
        except StorageError as exc:
            self._show_storage_problem(str(exc))
            return
        self.store.close()
        self.store = self.conversations.store = store
        self.storage_banner.hide()
        self.new_chat()
        self.conversations.refresh()
        self.statusBar().showMessage(f"Started a fresh history; the old file is now {aside}.")

    # ---------------------------------------------------------------- layout
    def _build_ui(self) -> None:
        self.conversations = ConversationList(self.store, self)
        self.model_bar = ModelBar(self)
        self.chat = ChatView(self)
        self.chat.set_colour_draft(self.settings.colour_draft_tokens)
        self.chat.browser.setPlaceholderText(
            "Start a conversation: type below and press Ctrl+Enter.\n\n"
            "Replies are generated on this machine. The panel on the right shows the decoding "
            "speed live, how many drafted tokens the model accepts, and how full the context is."
        )
        self.error_label = ErrorBanner(self)
        self.storage_banner = StorageBanner(self)
        self.storage_label = self.storage_banner.label
        self.storage_fresh_button = self.storage_banner.fresh_button
        self.prompt_edit = QPlainTextEdit(self)
        self.prompt_edit.setAccessibleName("Prompt")
        self.prompt_edit.setPlaceholderText("Message FlashChat…  (Ctrl+Enter sends, Esc stops)")
        self.prompt_edit.setMaximumHeight(90)
        self.context_meter = QProgressBar(self)
        self.context_meter.setAccessibleName("Context used")
        self.context_meter.setTextVisible(True)
        self.context_meter.setFormat("context –")
        self.context_note = QLabel(self)
        self.context_note.setAccessibleName("Context warning")
        self.context_note.hide()
        self.send_button = QPushButton("Send", self)
        self.send_button.setAccessibleName("Send")
        self.send_button.setEnabled(False)
        self.send_button.setDefault(True)
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setAccessibleName("Stop")
        self.stop_button.setEnabled(False)
        self.think_box = QCheckBox("Think", self)
        self.think_box.setAccessibleName("Think")
        self.think_box.setToolTip(
            "A thinking model reasons before it answers (the reasoning folds away above the "
            "answer). Each conversation keeps its own choice."
        )
        self.think_box.setChecked(self.settings.think)
        self.think_box.hide()  # shown for models that think
        self.settings_button = QPushButton("Settings…", self)
        self.settings_button.setAccessibleName("Settings")
        self.panel = SpeedPanel(self)
        self.panel.set_auto(self.settings.forced_mode == "auto")
        self.panel.set_forced_mode(self.settings.forced_mode)

        row = QHBoxLayout()
        row.addWidget(self.context_meter, 1)
        row.addWidget(self.think_box)
        row.addWidget(self.settings_button)
        row.addWidget(self.stop_button)
        row.addWidget(self.send_button)
        center = QWidget(self)
        col = QVBoxLayout(center)
        self._center_column = col
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self.model_bar)
        col.addWidget(self.storage_banner)
        col.addWidget(self.error_label)
        col.addWidget(self.chat, 1)
        col.addWidget(self.context_note)
        col.addWidget(self.prompt_edit)
        col.addLayout(row)
        splitter = QSplitter(Qt.Orientation.Horizontal, self)
        splitter.addWidget(self.conversations)
        splitter.addWidget(center)
        splitter.addWidget(self.panel)
        splitter.setStretchFactor(1, 1)
        splitter.setCollapsible(1, False)
        splitter.setCollapsible(2, False)  # the speed panel stays, however narrow the window
        splitter.setSizes([220, 760, 300])
        self.setCentralWidget(splitter)

        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        self.settings_button.clicked.connect(self.open_settings)
        self.think_box.toggled.connect(self._on_think_toggled)
        self.conversations.selected.connect(self.open_conversation)
        self.conversations.new_requested.connect(self.new_chat)
        self.conversations.deleted.connect(self._on_deleted)
        self.conversations.storage_failed.connect(self._on_storage_failed)
        self.storage_fresh_button.clicked.connect(self.start_fresh_history)
        self.chat.regenerate_requested.connect(self.regenerate)
        self.chat.edit_requested.connect(self.edit_message)
        self.chat.copied.connect(lambda _t: self.statusBar().showMessage("Copied", 2000))
        self.panel.auto_toggled.connect(self._on_auto_toggled)
        self.panel.forced_mode_changed.connect(self._on_forced_mode)
        self.model_bar.load_requested.connect(self._load)
        QShortcut(QKeySequence("Ctrl+Return"), self, activated=self.send)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, activated=self.stop)
        QShortcut(QKeySequence.StandardKey.New, self, activated=self.new_chat)
        search = self.conversations.search_box
        QShortcut(QKeySequence.StandardKey.Find, self, activated=search.setFocus)
        # Model drops land on the window (the read-only conversation does not take them; the
        # prompt keeps plain-text drops and hands links and files to the window). Paste adds a
        # model when focus is outside the prompt, which pastes text as usual.
        self.setAcceptDrops(True)
        self.chat.browser.setAcceptDrops(False)
        self.chat.browser.viewport().setAcceptDrops(False)
        self.prompt_edit.viewport().installEventFilter(self)
        QShortcut(QKeySequence.StandardKey.Paste, self, activated=self.paste_source)
        self.model_bar.library_requested.connect(self.open_library)
        self.model_bar.connect_requested.connect(self.open_connect)
        self.transfer = HistoryTransfer(self, lambda: self.store, lambda: self.conversation_id)
        self.transfer.notice.connect(lambda text: self.statusBar().showMessage(text, 8000))
        self.transfer.imported.connect(self._on_imported)
        self.conversations.export_requested.connect(self.transfer.ask_export)
        about = self.menuBar().addMenu("&Help").addAction("About FlashChat")
        about.setMenuRole(QAction.MenuRole.AboutRole)  # macOS: in the application menu
        about.triggered.connect(self.show_about)
        self.model_bar.remote_specs = saved_remote_models(self.settings.remote_models)
        self.model_bar.refresh()

    def _start_worker(self) -> None:
        self._thread = QThread(self)
        self._thread.setObjectName("engine-worker")
        self.worker = EngineWorker()
        self.worker.moveToThread(self._thread)
        self.request_load.connect(self.worker.load_model)
        self.request_generate.connect(self.worker.generate)
        self.worker.model_loaded.connect(self._on_loaded)
        self.worker.started.connect(self._on_started)
        self.worker.segments.connect(self._on_segments)
        self.worker.mode_switched.connect(self._on_mode_switched)
        self.worker.finished.connect(self._on_finished)
        self.worker.error.connect(self._on_error)
        self.worker.notice.connect(self._on_notice)
        self.worker.served.connect(self._on_served)
        self._thread.start()
        self.local_server = LocalServer(self.worker)
        self.server_label = QLabel(self)
        self.server_label.setAccessibleName("Local server")
        self.statusBar().addPermanentWidget(self.server_label)
        self._apply_serving()

    def _start_library(self) -> None:
        self._library_thread = QThread(self)
        self._library_thread.setObjectName("library-worker")
        self.library_worker = LibraryWorker()
        self.library_worker.moveToThread(self._library_thread)
        self.library_view = LibraryView(self.library_worker, self)
        self.library_view.library_changed.connect(self._on_library_changed)
        self.library_view.load_requested.connect(self._load)
        self._library_thread.start()

    # ------------------------------------------------------------- model library
    @Slot()
    def open_library(self) -> None:
        self.library_view.refresh()
        self.library_view.show()
        self.library_view.raise_()
        self.library_view.activateWindow()

    def add_from_mime(self, mime) -> str | None:
        """Install what a drop or paste names (the library opens to show it); the job id."""
        self.open_library()
        return self.library_view.add_from_mime(mime)

    @Slot()
    def paste_source(self) -> None:
        self.add_from_mime(QGuiApplication.clipboard().mimeData())

    @staticmethod
    def _names_a_model(mime) -> bool:
        try:
            source_from_mime(mime, endpoint_hosts())
        except SourceError:
            return False
        return True

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        # Any file or link is taken (the library then says why it cannot add it); text only
        # when it names a model, so dragging a sentence over the window is refused at once.
        if event.mimeData().hasUrls() or self._names_a_model(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        if self.add_from_mime(event.mimeData()) is not None:
            event.acceptProposedAction()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Links and files dropped on the prompt add a model; plain text is typed in."""
        kind = event.type()
        if (
            kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove, QEvent.Type.Drop)
            and event.mimeData().hasUrls()
            and self._names_a_model(event.mimeData())
        ):
            if kind == QEvent.Type.Drop:
                self.add_from_mime(event.mimeData())
            event.acceptProposedAction()
            return True
        return super().eventFilter(watched, event)

    def _show_first_run(self) -> None:
        """No model anywhere: explain, and offer the demo model or a file (the library
        installs it; ``_on_library_changed`` loads it)."""
        self.model_bar.set_status("No model installed")
        self.first_run = NoModelPanel(self)
        self.first_run.download_requested.connect(self._install_text)
        self.first_run.file_chosen.connect(self._install_path)
        self.chat.hide()
        column = self._center_column
        column.insertWidget(column.indexOf(self.chat) + 1, self.first_run, 1)

    def _install_text(self, text: str) -> None:
        self.open_library()
        self.library_view.start(parse_drop([], [], text, endpoint_hosts()))

    def _install_path(self, path: str) -> None:
        self.open_library()
        self.library_view.start(parse_drop([Path(path)]))

    @Slot()
    def _on_library_changed(self) -> None:
        """New or removed models show in the model bar; the selection stays. The first model
        installed into an empty library is loaded."""
        if self.first_run is not None:
            self.model_bar.refresh()
            if self.model_bar.target_box.count():
                self.first_run.hide()
                self.first_run = None
                self.chat.show()
                self.model_bar.set_status("Loading model…")
                self._load(self.model_bar.target_box.itemData(0), "")
                return
        bar = self.model_bar
        target = bar.target_box.currentData() or ""
        drafter = bar.drafter_box.currentData() or ""
        bar.refresh(target, drafter)
        for box, value in ((bar.target_box, target), (bar.drafter_box, drafter)):
            box.setCurrentIndex(max(box.findData(value), 0))

    # ------------------------------------------------------------- actions
    def _load(self, target: str, drafter: str) -> None:
        if self.generating:
            self.stop()
        self.send_button.setEnabled(False)
        self.request_load.emit(target, drafter)

    @Slot()
    def new_chat(self) -> None:
        if self.generating:
            return
        self.conversation_id = None
        self.conversations.list.clearSelection()
        self.conversations.list.setCurrentItem(None)
        self.chat.clear()
        self._update_context(0)
        self.think_box.blockSignals(True)
        self.think_box.setChecked(self.settings.think)
        self.think_box.blockSignals(False)
        self.prompt_edit.setFocus()

    @Slot(int)
    def open_conversation(self, conversation_id: int) -> None:
        if self.generating:
            if conversation_id != self.conversation_id and self.conversation_id is not None:
                self.conversations.select(self.conversation_id, emit=False)
            return
        self.conversation_id = conversation_id
        self.chat.clear()
        with self._storage():
            messages = self.store.messages(conversation_id)
            for msg in messages:
                if msg.role != "system":
                    self.chat.add_message(msg.role, msg.content, msg.id, msg.stats, msg.reasoning)
            think = self.store.think(conversation_id)
            self.think_box.blockSignals(True)
            self.think_box.setChecked(self.settings.think if think is None else think)
            self.think_box.blockSignals(False)
            last = next((m.stats for m in reversed(messages) if m.stats), None)
            self._update_context(int(last.get("context_depth", 0)) if last else 0)

    @Slot()
    def send(self) -> None:
        text = self.prompt_edit.toPlainText().strip()
        if not text or self.generating or not self.send_button.isEnabled():
            return
        try:
            if self.conversation_id is None:
                title = text.splitlines()[0][:60]
                self.conversation_id = self.store.create_conversation(title).id
                self.store.set_think(self.conversation_id, self.think_box.isChecked())
                self.conversations.refresh()
                self.conversations.select(self.conversation_id, emit=False)
            message = self.store.add_message(self.conversation_id, "user", text)
        except StorageError as exc:  # the typed text stays in the prompt
            self._show_storage_problem(str(exc))
            return
        self.chat.add_message("user", text, message.id)
        self.prompt_edit.clear()
        self._generate()

    def _generate(self) -> None:
        try:
            stored = self.store.messages(self.conversation_id)
        except StorageError as exc:
            self._show_storage_problem(str(exc))
            return
        history = [
            {"role": m.role, "content": m.content}
            for m in stored
            if m.role in ("user", "assistant")
        ]
        if self.settings.system_prompt:
            history.insert(0, {"role": "system", "content": self.settings.system_prompt})
        self.error_label.hide()
        self.generating = True
        self.send_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.chat.start_assistant()
        settings = self._generation_settings()
        self._reply_record = reply_record(self._loaded, settings)
        self.request_generate.emit(history, settings)

    def _generation_settings(self) -> dict:
        s = asdict(self.settings) | self._overrides
        s["mode"] = self._mode()
        s.pop("think", None)
        if self._loaded is not None and self._loaded.thinks:
            s["thinking"] = self.think_box.isChecked()
        return s

    @Slot(bool)
    def _on_think_toggled(self, on: bool) -> None:
        """The choice belongs to the conversation, and new chats start from the last one."""
        self.settings = replace(self.settings, think=on)
        with self._storage():
            if self.conversation_id is not None:
                self.store.set_think(self.conversation_id, on)
            save_settings(self.store, self.settings)

    def _mode(self) -> Mode:
        """The mode for the next reply: the forced one while the model offers it, else auto."""
        return fallback(self.settings.forced_mode, self.available_modes)

    @Slot()
    def stop(self) -> None:
        if self.generating:
            self.worker.cancel()

    @Slot(int)
    def regenerate(self, message_id: int) -> None:
        if self.generating or self.conversation_id is None:
            return
        try:
            self.store.delete_messages_from(self.conversation_id, message_id)
        except StorageError as exc:
            self._show_storage_problem(str(exc))
            return
        self.open_conversation(self.conversation_id)
        self._generate()

    @Slot(int)
    def edit_message(self, message_id: int) -> None:
        if self.generating or self.conversation_id is None:
            return
        text = self.chat.message_text(message_id)
        try:
            self.store.delete_messages_from(self.conversation_id, message_id)
        except StorageError as exc:
            self._show_storage_problem(str(exc))
            return
        self.open_conversation(self.conversation_id)
        self.prompt_edit.setPlainText(text)
        self.prompt_edit.setFocus()

    def about_text(self) -> str:
        return (
            f"<h3>FlashChat {version()}</h3>"
            "<p>Chat with language models on this computer, decoded with DFlash2 speculative "
            "decoding: the same text as the model's own, faster.</p>"
            f"<p>{self._backend_summary or 'No model loaded'}</p>"
            "<p>Apache-2.0. Third-party licences: THIRD_PARTY.md.</p>"
        )

    def ask_and_quit(self, text: str) -> None:
        """Answer ``text`` once loaded, print the reply and close (``app.ask_mode``)."""
        self._overrides = dict(OVERRIDES)
        self._asker = AskAndQuit(self, text)

    @Slot()
    def show_about(self) -> None:
        QMessageBox.about(self, "About FlashChat", self.about_text())

    @Slot()
    def open_connect(self) -> None:
        """Add a model on a remote server, save it with the settings, and load it."""
        dialog = ConnectDialog(self)
        if not dialog.exec():
            return
        spec = dialog.endpoint().to_spec()
        specs = [s for s in saved_remote_models(self.settings.remote_models) if s != spec] + [spec]
        self.settings = replace(self.settings, remote_models=json.dumps(specs))
        with self._storage():
            save_settings(self.store, self.settings)
        self.model_bar.remote_specs = specs
        self.model_bar.refresh(spec)
        self.model_bar.target_box.setCurrentIndex(self.model_bar.target_box.findData(spec))
        self._load(spec, "")

    @Slot()
    def open_settings(self) -> None:
        dialog = SettingsDialog(self.settings, self)
        if dialog.exec():
            self.settings = dialog.result_settings()
            with self._storage():
                save_settings(self.store, self.settings)
            self.chat.set_colour_draft(self.settings.colour_draft_tokens)
            self._apply_serving()

    def _apply_serving(self) -> None:
        """Start, stop or move the local server to match the settings."""
        want = self.settings.serve_enabled
        port = self.settings.serve_port
        if self.local_server.running and (
            not want or not self.local_server.address.endswith(f":{port}/v1")
        ):
            self.local_server.stop()
        if want and not self.local_server.running:
            try:
                self.local_server.start(port)
            except OSError as exc:
                self._on_error(
                    f"Cannot serve on port {port}: {exc.strerror or exc}. Choose another port "
                    "in Settings."
                )
        address = self.local_server.address
        self.server_label.setText(f"Serving on {address}" if address else "")
        self.server_label.setVisible(bool(address))

    def _on_auto_toggled(self, enabled: bool) -> None:
        self._on_forced_mode(Mode.AUTO if enabled else self._mode())

    def _on_forced_mode(self, mode: str) -> None:
        self.settings = replace(self.settings, forced_mode=mode)
        self.panel.set_auto(mode == Mode.AUTO)
        self.panel.set_forced_mode(mode)
        with self._storage():
            save_settings(self.store, self.settings)

    def _on_imported(self, ids: list[int]) -> None:
        self.conversations.refresh()
        if ids and not self.generating:
            self.conversations.select(ids[0])

    def _on_deleted(self, conversation_id: int) -> None:
        if conversation_id == self.conversation_id:
            self.new_chat()

    # ------------------------------------------------------------- worker events
    @Slot(object)
    def _on_loaded(self, info: ModelInfo) -> None:
        self._loaded = info
        self.think_box.setVisible(info.thinks)
        self.available_modes = list(info.modes)
        self.max_context = info.max_context
        self.model_bar.show_loaded(info)
        self.panel.set_available_modes([m for m in info.modes if m != Mode.AUTO])
        self.panel.set_max_context(self.max_context)
        self.panel.set_forced_mode(self.settings.forced_mode)
        self._backend_summary = info.backend
        self.statusBar().showMessage(info.backend)
        self.statusBar().setToolTip(info.backend_detail)
        self.send_button.setEnabled(True)
        self.error_label.hide()

    @Slot(object)
    def _on_started(self, event: Started) -> None:
        self.panel.generation_started(event.prompt_tokens, event.mode)
        self._update_context(event.prompt_tokens)

    @Slot(object)
    def _on_segments(self, update: LiveUpdate) -> None:
        self.chat.append_reasoning(update.reasoning)
        self.chat.append_assistant(list(update.segments))
        step = update.latest
        if step is not None:
            self.panel.set_part(step.part if self._loaded and self._loaded.thinks else "")
            self.panel.update_live(
                step.live_tps, step.context_depth, step.tau, step.acceptance_rate, step.step.mode
            )
            self._update_context(step.context_depth)

    @Slot(object)
    def _on_mode_switched(self, event: ModeSwitch) -> None:
        self.panel.mode_switched(event.from_mode, event.to_mode, event.reason)

    @Slot(object)
    def _on_finished(self, event: Finished) -> None:
        self.generating = False
        stats = {**event.stats.to_json(), "reason": event.reason, **self._reply_record}
        if not math.isfinite(stats["tau"]):  # a remote server that does not report it
            stats["tau"] = None
        message_id = -1
        if self.conversation_id is not None and (event.text or event.reasoning):
            with self._storage():
                message_id = self.store.add_message(
                    self.conversation_id, "assistant", event.text, stats, event.reasoning or None
                ).id
                self.conversations.refresh()
        self.chat.finish_assistant(message_id, stats, event.reason, event.reasoning)
        self.panel.set_part("")
        self.panel.generation_finished(stats)
        self._update_context(event.stats.context_depth)
        self.send_button.setEnabled(True)
        self.stop_button.setEnabled(False)

    @Slot(object)
    def _on_served(self, event: Started | Tokens | Finished) -> None:
        """A local server request: the speed panel shows it as it streams (the chat does
        not: the reply belongs to the client)."""
        if isinstance(event, Started):
            self.panel.generation_started(event.prompt_tokens, event.mode)
            self.statusBar().showMessage("Serving a request…")
        elif isinstance(event, Tokens):
            self.panel.update_live(
                event.live_tps,
                event.context_depth,
                event.tau,
                event.acceptance_rate,
                event.step.mode,
            )
        else:
            self.panel.generation_finished({**event.stats.to_json(), "reason": event.reason})
            self.statusBar().showMessage(self._backend_summary)

    @Slot(str)
    def _on_notice(self, text: str) -> None:
        """A passing note in the status bar; "" puts the backend summary back."""
        self.statusBar().showMessage(text or self._backend_summary)

    def _on_error(self, message: str) -> None:
        self.error_label.show_message(message)
        if self.generating:
            self.generating = False
            self.chat.finish_assistant(-1, None, "cancelled")
        self.stop_button.setEnabled(False)
        self.send_button.setEnabled(bool(self.available_modes))
        if not self.available_modes:
            self.model_bar.set_status("No model loaded")

    def _update_context(self, depth: int) -> None:
        if self.max_context <= 0:
            return
        self.context_meter.setRange(0, self.max_context)
        self.context_meter.setValue(min(depth, self.max_context))
        self.context_meter.setFormat(f"context {depth:,} / {self.max_context:,}")
        share = depth / self.max_context
        if share >= CONTEXT_WARNING:
            self.context_note.setText(
                f"The conversation fills {share:.0%} of the model's context: start a new chat "
                "soon, or the reply will be cut short."
            )
            self.context_note.show()
        else:
            self.context_note.hide()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.worker.cancel()
        self.local_server.stop()
        self.library_worker.cancel_all()  # downloads keep their bytes for the next start
        self.library_view.close()
        geometry = bytes(self.saveGeometry().toBase64()).decode()
        self.settings = replace(self.settings, window_geometry=geometry)
        with self._storage():
            save_settings(self.store, self.settings)
        self._thread.quit()
        self._library_thread.quit()
        self._thread.wait(10000)
        self._library_thread.wait(35000)
        self.store.close()
        super().closeEvent(event)
