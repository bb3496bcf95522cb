"""Messages between the pipeline's ranks, over ``mlx.core.distributed`` send and receive.

A message is a fixed header of int32 fields and one float32 body. One body, because each
send or receive is its own evaluation (one round of the backend's sockets): a forward's
hidden rows, positions, mask, tree and the captured features travel as one array. Every
value in the body is exact in float32: hidden rows of a float32, float16 or bfloat16 target,
booleans, and the integers (positions, layer ids, kept rows) are all below 2**24.
Messages only go to the next rank (``rank + 1``, the last one to rank 0), which is the
neighbour every backend connects, the ring's included.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from enum import IntEnum

import mlx.core as mx
import numpy as np

from engine_mlx.distributed.doorbell import Doorbell

HEADER = 12
DELAY_ENV = "FLASHCHAT_PIPELINE_DELAY_MS"


class Op(IntEnum):
    FORWARD = 1  # a: rows, b: hidden; body: h, positions?, mask?, tree?, features, capture
    NEW = 2  # key: a new cache set
    FREE = 3  # key: a cache set no longer used
    TRIM = 4  # key, a: tokens to drop
    COMPACT = 5  # key, a: start; ints: the rows kept
    SNAPSHOT = 6  # key, a: the snapshot's key
    RESTORE = 7  # key, a: the snapshot's key
    FREE_SNAPSHOT = 8  # a: the snapshot's key
    KEEP = 9  # key, a: the kept state's key (the prompt cache's copy)
    FROM_KEPT = 10  # key: the new cache set, a: the kept state's key
    FREE_KEPT = 11  # a: the kept state's key
    STOP = 12  # the engine is done: every stage exits
    ERROR = 13  # body: the message, UTF-8 bytes


@dataclass
class Message:
    """One message: its operation, the cache set it is about, two integer arguments, the
    shape flags of a forward, and its body."""

    op: Op
    key: int = 0
    a: int = 0
    b: int = 0
    positions: bool = False
    mask_columns: int = 0
    tree: bool = False
    features: int = 0
    ints: int = 0
    body: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))

    def header(self) -> np.ndarray:
        fields = [self.op, self.key, self.a, self.b, int(self.positions), self.mask_columns,
                  int(self.tree), self.features, self.ints, self.body.size, 0, 0]  # fmt: skip
        return np.asarray(fields, np.int32)

    @classmethod
    def from_header(cls, header: np.ndarray) -> tuple[Message, int]:
        h = [int(v) for v in header]
        message = cls(Op(h[0]), h[1], h[2], h[3], bool(h[4]), h[5], bool(h[6]), h[7], h[8])
        return message, h[9]


def error_message(text: str) -> Message:
    data = np.frombuffer(text.encode("utf-8", "replace"), np.uint8).astype(np.float32)
    return Message(Op.ERROR, body=data)


def error_text(message: Message) -> str:
    return bytes(message.body.astype(np.uint8)).decode("utf-8", "replace")


class Link:
    """This rank's two neighbours in the pipeline: messages come from the previous rank and
    go to the next one (``doorbell``: rung before each, so a waiting rank sleeps)."""

    def __init__(self, group: mx.distributed.Group, doorbell: Doorbell | None = None) -> None:
        self.group, self.doorbell = group, doorbell
        # A simulated link latency, seconds per hop (``FLASHCHAT_PIPELINE_DELAY_MS``): the
        # benchmark's, where the network cannot be slowed (no netem in these kernels).
        self.delay = float(os.environ.get(DELAY_ENV, "0") or 0) / 1000
        self.rank, self.size = group.rank(), group.size()
        self.next = (self.rank + 1) % self.size
        self.previous = (self.rank - 1) % self.size

    def send(self, message: Message) -> None:
        """The bell, the header, then the body: separate evaluations, so they arrive in
        that order. ``RuntimeError`` if the next rank has gone."""
        if self.delay:
            time.sleep(self.delay)
        if self.doorbell is not None:
            try:
                self.doorbell.ring()
            except OSError as exc:
                raise RuntimeError(f"rank {self.next}'s connection failed: {exc}") from exc
        mx.eval(mx.distributed.send(mx.array(message.header()), self.next, group=self.group))
        if message.body.size:
            body = mx.array(np.ascontiguousarray(message.body, np.float32))
            mx.eval(mx.distributed.send(body, self.next, group=self.group))

    def receive(self, timeout: float | None = None) -> Message:
        """The next message from the previous rank; ``RuntimeError`` if it has gone or
        (with a doorbell) nothing came in ``timeout`` seconds."""
        if self.doorbell is not None:
            try:
                self.doorbell.wait(timeout)
            except (ConnectionError, TimeoutError) as exc:
                raise RuntimeError(f"rank {self.previous}: {exc}") from exc
        header = mx.distributed.recv((HEADER,), mx.int32, self.previous, group=self.group)
        message, size = Message.from_header(np.asarray(header))
        if size:
            body = mx.distributed.recv((size,), mx.float32, self.previous, group=self.group)
            message.body = np.asarray(body)
        return message


@dataclass
class Rows:
    """What a forward carries from stage to stage: the hidden rows ([1, L, H]), the
    verification's positions, mask and tree, the captured layers' rows so far, and the layer
    ids to capture (ascending)."""

    hidden: np.ndarray
    positions: np.ndarray | None = None
    mask: np.ndarray | None = None
    tree: np.ndarray | None = None
    features: list[np.ndarray] = field(default_factory=list)
    capture: tuple[int, ...] = ()


def forward_message(key: int, rows: Rows) -> Message:
    _, length, hidden = rows.hidden.shape
    parts = [rows.hidden.reshape(-1)]
    for part in (rows.positions, rows.mask, rows.tree):
        if part is not None:
            parts.append(np.asarray(part).reshape(-1))
    parts += [f.reshape(-1) for f in rows.features]
    parts.append(np.asarray(rows.capture, np.float32))
    body = np.concatenate([p.astype(np.float32, copy=False) for p in parts])
    columns = 0 if rows.mask is None else rows.mask.shape[-1]
    return Message(Op.FORWARD, key, length, hidden, rows.positions is not None, columns,
                   rows.tree is not None, len(rows.features), len(rows.capture), body)  # fmt: skip


def forward_rows(message: Message) -> Rows:
    length, hidden, body = message.a, message.b, message.body
    at = 0

    def take(count: int) -> np.ndarray:
        nonlocal at
        at += count
        return body[at - count : at]

    rows = Rows(take(length * hidden).reshape(1, length, hidden))
    if message.positions:
        rows.positions = take(length).astype(np.int32)
    if message.mask_columns:
        rows.mask = take(length * message.mask_columns).reshape(length, -1).astype(bool)
    if message.tree:
        rows.tree = take(length * length).reshape(length, length).astype(bool)
    rows.features = [
        take(length * hidden).reshape(1, length, hidden) for _ in range(message.features)
    ]
    rows.capture = tuple(int(v) for v in take(message.ints))
    return rows
