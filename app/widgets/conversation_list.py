"""The left column: search, the conversations (most recent first), new / rename / delete."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QInputDialog,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.storage import Conversation, ConversationStore, StorageError


class ConversationList(QWidget):
    """Lists the store's conversations; the store is the single source of truth."""

    selected = Signal(int)  # conversation id
    new_requested = Signal()
    deleted = Signal(int)
    export_requested = Signal(list)  # conversation ids
    storage_failed = Signal(object)  # StorageError: the window shows it; the list keeps going

    def __init__(self, store: ConversationStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.search_box = QLineEdit(self)
        self.search_box.setPlaceholderText("Search conversations")
        self.search_box.setAccessibleName("Search conversations")
        self.search_box.setClearButtonEnabled(True)
        self.list = QListWidget(self)
        self.list.setAccessibleName("Conversations")
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.setSelectionMode(QListWidget.SelectionMode.ExtendedSelection)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.new_button = QPushButton("New chat", self)
        self.new_button.setAccessibleName("New chat")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search_box)
        layout.addWidget(self.list, 1)
        self.search_box.textChanged.connect(self.refresh)
        self.list.currentItemChanged.connect(self._on_current)
        self.list.customContextMenuRequested.connect(self._menu)
        self.new_button.clicked.connect(self.new_requested)
        self.refresh()

    def refresh(self, *_: object) -> None:
        query = self.search_box.text().strip()
        try:
            items = self.store.search(query) if query else self.store.list_conversations()
        except StorageError as exc:
            self.storage_failed.emit(exc)
            return
        current = self.current_id()
        self.list.blockSignals(True)
        self.list.clear()
        for conv in items:
            self.list.addItem(self._item(conv))
        self.list.blockSignals(False)
        if current is not None:
            self.select(current, emit=False)

    def _item(self, conv: Conversation) -> QListWidgetItem:
        item = QListWidgetItem(conv.title)
        item.setData(Qt.ItemDataRole.UserRole, conv.id)
        item.setToolTip(conv.title)
        return item

    def current_id(self) -> int | None:
        item = self.list.currentItem()
        return None if item is None else int(item.data(Qt.ItemDataRole.UserRole))

    def select(self, conversation_id: int, emit: bool = True) -> None:
        for row in range(self.list.count()):
            item = self.list.item(row)
            if item.data(Qt.ItemDataRole.UserRole) == conversation_id:
                self.list.blockSignals(not emit)
                self.list.setCurrentItem(item)
                self.list.blockSignals(False)
                return

    def _on_current(self, current: QListWidgetItem | None, _previous: object) -> None:
        if current is not None:
            self.selected.emit(int(current.data(Qt.ItemDataRole.UserRole)))

    def _menu(self, pos) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        conv_id = int(item.data(Qt.ItemDataRole.UserRole))
        chosen_ids = self.export_ids(item)
        menu = QMenu(self)
        rename = menu.addAction("Rename…")
        export = menu.addAction(
            "Export…" if len(chosen_ids) == 1 else f"Export {len(chosen_ids)} Conversations…"
        )
        delete = menu.addAction("Delete…")
        chosen = menu.exec(self.list.mapToGlobal(pos))
        if chosen is rename:
            self.rename(conv_id, item.text())
        elif chosen is export:
            self.export_requested.emit(chosen_ids)
        elif chosen is delete:
            self.delete(conv_id, item.text())

    def export_ids(self, item: QListWidgetItem) -> list[int]:
        """The selected conversations when the clicked one is among them, else that one."""
        selected = self.list.selectedItems()
        items = selected if item in selected else [item]
        return [int(i.data(Qt.ItemDataRole.UserRole)) for i in items]

    def rename(self, conv_id: int, old_title: str, new_title: str | None = None) -> None:
        if new_title is None:
            new_title, ok = QInputDialog.getText(self, "Rename chat", "Title:", text=old_title)
            if not ok:
                return
        try:
            self.store.rename_conversation(conv_id, new_title)
        except StorageError as exc:
            self.storage_failed.emit(exc)
        self.refresh()

    def delete(self, conv_id: int, title: str, confirm: bool = True) -> None:
        if confirm:
            answer = QMessageBox.question(
                self, "Delete chat", f"Delete “{title}” and all its messages?"
            )
            if answer != QMessageBox.StandardButton.Yes:
                return
        try:
            self.store.delete_conversation(conv_id)
        except StorageError as exc:
            self.storage_failed.emit(exc)
            return
        self.refresh()
        self.deleted.emit(conv_id)
