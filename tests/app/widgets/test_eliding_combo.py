"""Long model names shorten in the middle, keep both ends, and show whole in the tooltip."""

from __future__ import annotations

from app.widgets.eliding_combo import ElidingComboBox

NAME = "Qwen2.5-Coder-0.5B-Instruct-DFlash2"


def test_a_long_name_keeps_both_ends_and_its_tooltip(qtbot):
    box = ElidingComboBox()
    qtbot.addWidget(box)
    box.addItem("short", 1)
    box.addItem(NAME, 2)
    box.setCurrentIndex(1)
    box.setFixedWidth(150)
    box.show()
    shown = box.shown_text()
    assert "…" in shown and len(shown) < len(NAME)
    head, tail = shown.split("…")
    assert NAME.startswith(head) and NAME.endswith(tail) and head and tail
    assert box.toolTip() == NAME
    box.setFixedWidth(600)
    assert box.shown_text() == NAME
