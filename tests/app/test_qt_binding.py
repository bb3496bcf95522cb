"""The Qt binding must not leak references to None (PySide6 6.12.0 did, on Python 3.11, and
the app aborted with "none_dealloc" after a few thousand widget updates)."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QLabel


def test_void_calls_keep_none_refcount(qtbot):
    label = QLabel()
    qtbot.addWidget(label)
    before = sys.getrefcount(None)
    for _ in range(2000):
        label.setText("x")
        label.update()
    assert sys.getrefcount(None) >= before - 50
