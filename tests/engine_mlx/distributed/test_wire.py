"""A forward's rows survive the trip between ranks exactly, whatever the target's dtype."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.distributed.wire import (
    Message,
    Op,
    Rows,
    error_message,
    error_text,
    forward_message,
    forward_rows,
)


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
def test_a_forwards_rows_come_back_bit_for_bit(dtype):
    rng = np.random.default_rng(0)
    hidden = np.asarray(mx.array(rng.normal(size=(1, 5, 8)) * 100).astype(dtype).astype(mx.float32))
    rows = Rows(
        hidden,
        positions=np.array([40, 41, 41, 42, 43], np.int32),
        mask=rng.random((5, 45)) > 0.5,
        tree=np.tril(np.ones((5, 5), bool)),
        features=[hidden * 2, hidden - 1],
        capture=(3, 17),
    )
    message = forward_message(9, rows)
    header, size = Message.from_header(message.header())
    header.body = message.body
    assert (header.op, header.key, size) == (Op.FORWARD, 9, message.body.size)
    back = forward_rows(header)
    assert np.array_equal(back.hidden, hidden) and back.capture == (3, 17)
    assert np.array_equal(back.positions, rows.positions)
    assert np.array_equal(back.mask, rows.mask) and np.array_equal(back.tree, rows.tree)
    assert all(np.array_equal(a, b) for a, b in zip(back.features, rows.features, strict=True))


def test_a_plain_step_carries_no_placing():
    rows = forward_rows(forward_message(1, Rows(np.ones((1, 1, 4), np.float32))))
    assert rows.positions is None and rows.mask is None and rows.tree is None
    assert rows.features == [] and rows.capture == ()


def test_an_error_reads_back_as_written():
    text = "rank 2 failed: ValueError: ✗"
    assert error_text(error_message(text)) == text
