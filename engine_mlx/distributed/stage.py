"""A rank after the first: its layers of the target, run on every forward that comes around
the pipeline, with one cache set per key rank 0 names (its generation's, the kept prompt's
copy, the calibration's), snapshots for hybrid rollback, and nothing else: no tokenizer
work, no sampler, no drafter."""

from __future__ import annotations

import sys
from typing import Any

import mlx.core as mx
import numpy as np

from engine_mlx.distributed.wire import (
    Link,
    Message,
    Op,
    Rows,
    error_message,
    forward_message,
    forward_rows,
)
from engine_mlx.models.target import CacheSnapshot, TargetModel
from engine_mlx.prompt_cache import restore_cache, snapshot_cache


class Stage:
    """One rank's layers and the cache sets rank 0 asked for, by key."""

    def __init__(self, target: TargetModel) -> None:
        self.target = target
        self.caches: dict[int, list[Any]] = {}
        self.snapshots: dict[int, CacheSnapshot] = {}
        self.kept: dict[int, list[tuple[type, Any, Any]]] = {}

    def forward(self, key: int, rows: Rows) -> Rows:
        target, first = self.target, self.target.first_layer
        mine = [i for i in rows.capture if first <= i < first + len(target.layers)]
        h = mx.array(rows.hidden).astype(target.dtype)
        positions = None if rows.positions is None else mx.array(rows.positions)
        mask = None if rows.mask is None else mx.array(rows.mask)
        tree = None if rows.tree is None else mx.array(rows.tree)
        captured: dict[int, mx.array] = {}
        with target.placed(positions, tree):
            h = target.run_layers(h, self.caches[key], positions, mask, mine, captured)
        rows.hidden = np.asarray(h.astype(mx.float32))
        rows.features += [np.asarray(captured[i].astype(mx.float32)) for i in mine]
        return rows

    def command(self, message: Message) -> None:
        """A cache command; the target's own cache operations do the work."""
        op, key, a, target = message.op, message.key, message.a, self.target
        if op is Op.NEW:
            self.caches[key] = target.make_cache()
        elif op is Op.FREE:
            self.caches.pop(key, None)
        elif op is Op.TRIM:
            target.trim(self.caches[key], a)
        elif op is Op.COMPACT:
            target.compact(self.caches[key], a, [int(v) for v in message.body])
        elif op is Op.SNAPSHOT:
            self.snapshots[a] = target.snapshot(self.caches[key])
        elif op is Op.RESTORE:
            target.restore(self.caches[key], self.snapshots[a])
        elif op is Op.FREE_SNAPSHOT:
            self.snapshots.pop(a, None)
        elif op is Op.KEEP:
            self.kept[a] = snapshot_cache(self.caches[key])
        elif op is Op.FROM_KEPT:
            self.caches[key] = restore_cache(self.kept[a])
        elif op is Op.FREE_KEPT:
            self.kept.pop(a, None)
        else:
            raise ValueError(f"unknown pipeline message {op!r}")


def serve_stage(target: TargetModel, link: Link) -> int:
    """Runs until rank 0 says stop (0) or the pipeline breaks (1). Messages pass on to the
    next rank in the order they came; a command that failed is reported by the next forward,
    which rank 0 waits for."""
    stage, last = Stage(target), link.rank == link.size - 1
    failed: str | None = None
    try:
        while True:
            message = link.receive()
            if message.op is Op.STOP:
                if not last:
                    link.send(message)
                return 0
            if message.op is Op.ERROR:
                link.send(message)  # an earlier rank's, on its way to rank 0
            elif message.op is Op.FORWARD:
                reply = error_message(failed) if failed else None
                if reply is None:
                    try:
                        reply = forward_message(
                            message.key, stage.forward(message.key, forward_rows(message))
                        )
                    except Exception as exc:  # reported to rank 0, which ends the request
                        reply = error_message(_failure(link, exc))
                link.send(reply)
            else:
                try:
                    stage.command(message)
                except Exception as exc:
                    failed = failed or _failure(link, exc)
                if not last:
                    link.send(message)
    except RuntimeError as exc:  # a neighbour is gone: nothing left to serve
        print(f"rank {link.rank}: the pipeline broke ({exc}); stopping", file=sys.stderr)
        return 1


def _failure(link: Link, exc: Exception) -> str:
    return f"rank {link.rank} failed: {type(exc).__name__}: {exc}"
