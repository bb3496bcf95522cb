"""FlashChat's main window: conversations | chat | live speed panel.

The window owns the conversation store (GUI thread) and talks to the engine only through the
worker on its QThread: requests go out as queued signals, results come back as queued signals
(neither thread waits for the other); the reply streams in through a ``StreamPacer``. Its
parts: the composer, model drops (``model_drops``), the library and first run
(``library_controls``), the local server (``serving_controls``), keys (``window_keys``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

from PySide6.QtCore import QByteArray, QSignalBlocker, QThread, QTimer, Signal, Slot
from PySide6.QtGui import QCloseEvent, QIcon
from PySide6.QtWidgets import QMainWindow, QMessageBox

from app.about import about_text
from app.ask_mode import OVERRIDES, AskAndQuit
from app.engine_worker import EngineWorker
from app.first_run import NoModelPanel, has_any_model
from app.history_file import default_database_path, move_aside, open_history
from app.history_transfer import HistoryTransfer
from app.library_controls import LibraryControls
from app.messages import LiveUpdate, ModelInfo, reply_record
from app.model_drops import ModelDrops
from app.remote_models import ask_for_remote_model, saved_remote_models
from app.reply_keeper import ReplyKeeper
from app.serving_controls import ServingControls
from app.settings import save_settings
from app.settings_dialog import SettingsDialog
from app.storage import ConversationStore, StorageError
from app.stream_pacer import StreamPacer
from app.widgets.banners import ErrorBanner, StorageBanner
from app.widgets.chat_view import ChatView
from app.widgets.composer import Composer
from app.widgets.conversation_list import ConversationList
from app.widgets.layout import three_panes
from app.widgets.model_bar import ModelBar
from app.widgets.speed_panel import SpeedPanel
from app.window_keys import install_keys_and_menus
from engine_mlx.events import Finished, Started
from engine_mlx.modes import Mode, fallback

ICON = Path(__file__).resolve().parents[1] / "resources" / "icons" / "flashchat.svg"


class MainWindow(QMainWindow):
    request_load = Signal(str, str)
    request_generate = Signal(list, dict)
    storage_problem = Signal(str)  # what the banner says (``ask_mode`` hears it too)

    def __init__(
        self, model_path: str = "", drafter_path: str = "", db_path: Path | None = None
    ) -> None:
        super().__init__()
        self.setWindowTitle("FlashChat")
        if ICON.is_file():
            self.setWindowIcon(QIcon(str(ICON)))
        self.db_path = db_path or default_database_path()
        self.store, self.settings, opened = open_history(self.db_path)
        self.store_problem = ""  # the last thing said about the history ("" none)
        self.conversation_id: int | None = None
        self.max_context = 0
        self.generating = False
        self.available_modes: list[str] = []
        self._overrides: dict = {}  # generation settings not saved (``ask_and_quit``)
        self._loaded: ModelInfo | None = None
        self.keeper = ReplyKeeper(lambda: self.store)  # the reply, saved as it streams
        self._backend_summary = ""  # the status bar's resting message once a model is loaded
        self._build_ui()
        if opened is not None:
            self._show_storage_problem(opened)
        self._start_worker()
        self._start_library()
        if self.settings.window_geometry:
            self.restoreGeometry(QByteArray.fromBase64(self.settings.window_geometry.encode()))
        else:
            self.resize(1280, 800)
        if not model_path and not has_any_model():
            self.library.show_first_run(self._center_column, self.chat)
        else:
            self.model_bar.set_status("Loading model…")
            QTimer.singleShot(0, self, lambda: self.request_load.emit(model_path, drafter_path))

    # ---------------------------------------------------------------- history file
    def _show_storage_problem(self, exc: StorageError) -> None:
        """What is wrong with the history and, for a file that cannot be used, the way out."""
        message = str(exc)
        if self.store.is_temporary:  # the file could not be opened: a memory store stands in
            then = "Until then" if exc.file_unusable else "Until FlashChat is restarted"
            message += f"\n{then}, chats in this window are not saved."
        self.store_problem = message
        self.storage_banner.show_problem(message, self.store.is_temporary and exc.file_unusable)
        self.storage_problem.emit(message)

    @contextmanager
    def _storage(self) -> Iterator[None]:
        """Runs a step on the history; a StorageError is shown instead of ending the caller."""
        try:
            yield
        except StorageError as exc:
            self._show_storage_problem(exc)

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
            self._show_storage_problem(exc)
            return
        self.store.close()
        self.store = self.conversations.store = store
        self.storage_banner.hide()
        self.new_chat()
        self.conversations.refresh()
        self.statusBar().showMessage(f"Started a fresh history; the old file is now {aside}.")

    def _build_ui(self) -> None:
        self.conversations = ConversationList(self.store, self)
        self.model_bar = ModelBar(self)
        self.chat = ChatView(self)
        self.chat.set_colour_draft(self.settings.colour_draft_tokens)
        self.error_label = ErrorBanner(self)
        self.storage_banner = StorageBanner(self)
        self.storage_label = self.storage_banner.label
        self.storage_fresh_button = self.storage_banner.fresh_button
        self.composer = Composer(self.settings.think, self)
        for name in ("prompt_edit", "context_meter", "context_note", "send_button", "stop_button",
                     "think_box", "settings_button"):  # fmt: skip
            setattr(self, name, getattr(self.composer, name))
        self.panel = SpeedPanel(self)
        self.panel.set_auto(self.settings.forced_mode == "auto")
        self.panel.set_forced_mode(self.settings.forced_mode)

        self._center_column = three_panes(
            self, self.conversations,
            [self.model_bar, self.storage_banner, self.error_label, self.chat, self.composer],
            self.panel, stretch=self.chat,
        )  # fmt: skip

        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        self.settings_button.clicked.connect(self.open_settings)
        self.think_box.toggled.connect(self._on_think_toggled)
        self.conversations.selected.connect(self.open_conversation)
        self.conversations.new_requested.connect(self.new_chat)
        self.conversations.deleted.connect(self._on_deleted)
        self.conversations.storage_failed.connect(self._show_storage_problem)
        self.storage_fresh_button.clicked.connect(self.start_fresh_history)
        self.chat.regenerate_requested.connect(self.regenerate)
        self.chat.edit_requested.connect(self.edit_message)
        self.chat.copied.connect(lambda _t: self.statusBar().showMessage("Copied", 2000))
        self.panel.auto_toggled.connect(self._on_auto_toggled)
        self.panel.forced_mode_changed.connect(self._on_forced_mode)
        self.model_bar.load_requested.connect(self._load)
        browser = self.chat.browser
        self.drops = ModelDrops(
            self, self.prompt_edit.viewport(), self.add_from_mime,
            (browser, browser.viewport()),
        )  # fmt: skip
        self.model_bar.library_requested.connect(self.open_library)
        self.model_bar.connect_requested.connect(self.open_connect)
        self.transfer = HistoryTransfer(self, lambda: self.store, lambda: self.conversation_id)
        self.transfer.notice.connect(lambda text: self.statusBar().showMessage(text, 8000))
        self.transfer.imported.connect(self._on_imported)
        self.conversations.export_requested.connect(self.transfer.ask_export)
        install_keys_and_menus(  # after File (HistoryTransfer): File, then Help
            self, send=self.send, stop=self.stop, new_chat=self.new_chat,
            find=self.conversations.search_box.setFocus, about=self.show_about,
        )  # fmt: skip
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
        self.pacer = StreamPacer(self._show_update, parent=self, paced=self.worker.pace_updates)
        self.worker.segments.connect(self.pacer.push)
        self.worker.mode_switched.connect(self.panel.show_mode_switch)
        self.worker.finished.connect(self._on_finished)
        self.worker.error.connect(self._on_error)
        self.worker.notice.connect(self._on_notice)
        self._thread.start()
        self.serving = ServingControls(
            self, self.worker, self.panel, self._on_error, lambda: self._backend_summary
        )
        self.local_server, self.server_label = self.serving.server, self.serving.label
        self.serving.apply(self.settings)

    def _start_library(self) -> None:
        self.library = LibraryControls(self, self.model_bar)
        self.library.load_requested.connect(self._load)
        self.library_view, self.library_worker = self.library.view, self.library.worker

    @property
    def first_run(self) -> NoModelPanel | None:
        return self.library.first_run

    @Slot()
    def open_library(self) -> None:
        self.library.open()

    def add_from_mime(self, mime) -> str | None:
        """Install what a drop or paste names (the library opens to show it); the job id."""
        self.library.open()
        return self.library_view.add_from_mime(mime)

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
        with QSignalBlocker(self.think_box):
            self.think_box.setChecked(self.settings.think)
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
            with QSignalBlocker(self.think_box):
                self.think_box.setChecked(self.settings.think if think is None else think)
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
            self._show_storage_problem(exc)
            return
        self.chat.add_message("user", text, message.id)
        self.prompt_edit.clear()
        self._generate()

    def _generate(self) -> None:
        try:
            stored = self.store.messages(self.conversation_id)
        except StorageError as exc:
            self._show_storage_problem(exc)
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
        self.keeper.start(self.conversation_id, reply_record(self._loaded, settings))
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
            self._show_storage_problem(exc)
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
            self._show_storage_problem(exc)
            return
        self.open_conversation(self.conversation_id)
        self.prompt_edit.setPlainText(text)
        self.prompt_edit.setFocus()

    def about_text(self) -> str:
        return about_text(self._backend_summary)

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
        added = ask_for_remote_model(self, self.settings.remote_models)
        if added is None:
            return
        spec, specs = added
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
            self.serving.apply(self.settings)

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
        self.pacer.pace_for(info.decodes_on_cpu, self.panel.chart)
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

    def _show_update(self, update: LiveUpdate) -> None:
        """What the pacer flushes: the text so far into the view, the numbers into the panel."""
        self.chat.append_reasoning(update.reasoning)
        self.chat.append_assistant(list(update.segments))
        with self._storage():
            self.keeper.add("".join(text for text, _ in update.segments), update.reasoning)
        step = update.latest
        if step is not None:
            self.panel.set_part(step.part if self._loaded and self._loaded.thinks else "")
            self.panel.update_live(
                step.live_tps, step.context_depth, step.tau, step.acceptance_rate, step.step.mode
            )
            self.composer.update_context(step.context_depth, self.max_context, live=True)

    @Slot(object)
    def _on_finished(self, event: Finished) -> None:
        self.pacer.flush()  # the last text reaches the view and the keeper first
        self.generating = False
        stats = self.keeper.final_stats({**event.stats.to_json(), "reason": event.reason})
        message_id = self.keeper.message_id or -1
        with self._storage():
            message_id = self.keeper.finish(event.text, event.reasoning, stats)
            self.conversations.refresh()
        self.chat.finish_assistant(message_id, stats, event.reason, event.reasoning)
        self.panel.set_part("")
        self.panel.generation_finished(stats)
        self._update_context(event.stats.context_depth)
        self.send_button.setEnabled(True)
        self.stop_button.setEnabled(False)

    @Slot(str)
    def _on_notice(self, text: str) -> None:
        """A passing note in the status bar; "" puts the backend summary back."""
        self.statusBar().showMessage(text or self._backend_summary)

    def _on_error(self, message: str) -> None:
        self.pacer.flush()
        self.error_label.show_message(message)
        if self.generating:  # what was kept of the reply stays, marked interrupted
            self.generating = False
            self.chat.finish_assistant(*self.keeper.abandoned())
        self.stop_button.setEnabled(False)
        self.send_button.setEnabled(bool(self.available_modes))
        if not self.available_modes:
            self.model_bar.set_status("No model loaded")

    def _update_context(self, depth: int) -> None:
        self.composer.update_context(depth, self.max_context)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.worker.cancel()
        self.local_server.stop()
        self.library.close()
        geometry = bytes(self.saveGeometry().toBase64()).decode()
        self.settings = replace(self.settings, window_geometry=geometry)
        with self._storage():
            save_settings(self.store, self.settings)
        # A job no one cuts short (a load, the step costs) may run on: wait, where destroying
        # its running thread would abort the process; the window goes at once.
        self.hide()
        self._thread.quit()
        self._thread.wait()
        self.library.wait()
        self.store.close()
        super().closeEvent(event)
