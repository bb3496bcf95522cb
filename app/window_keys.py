"""The window's keyboard shortcuts and menu bar."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QMainWindow


def install_keys_and_menus(
    window: QMainWindow,
    *,
    send: Callable[[], None],
    stop: Callable[[], None],
    new_chat: Callable[[], None],
    find: Callable[[], None],
    about: Callable[[], None],
) -> None:
    """Ctrl+Enter sends, Esc stops, New starts a chat, Find searches the conversations;
    Help → About (on macOS in the application menu)."""
    QShortcut(QKeySequence("Ctrl+Return"), window, activated=send)
    QShortcut(QKeySequence(Qt.Key.Key_Escape), window, activated=stop)
    QShortcut(QKeySequence.StandardKey.New, window, activated=new_chat)
    QShortcut(QKeySequence.StandardKey.Find, window, activated=find)
    action = window.menuBar().addMenu("&Help").addAction("About FlashChat")
    action.setMenuRole(QAction.MenuRole.AboutRole)
    action.triggered.connect(about)
