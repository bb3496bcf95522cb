"""The chart's switch markers: close ones merge into one that counts them."""

from __future__ import annotations

from app.widgets.rate_chart import merge_close_markers


def test_switch_markers_close_together_merge_into_one_that_counts_them():
    markers = [(10.0, "MTP"), (14.0, "DFlash2"), (18.0, "Plain"), (90.0, "DFlash2")]
    assert merge_close_markers(markers, min_gap=20) == [
        (18.0, "3 switches → Plain"),
        (90.0, "DFlash2"),
    ]
    assert merge_close_markers(markers, min_gap=2) == markers
    assert merge_close_markers([], min_gap=20) == []
