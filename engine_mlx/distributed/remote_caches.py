"""Rank 0's end of the pipeline: the caches of the other ranks' layers, as handles in the
target's cache list, and the client that sends them forwards and commands.

Each handle (``RemoteCaches``) stands for one cache set of every stage's layers, kept on
those ranks under its key; trimming, compacting, snapshots and the prompt cache's kept state
are forwarded as commands, in order, without waiting for an answer (the next forward's reply
reports a stage's failure). Handles, snapshots and kept states that are garbage-collected
free their remote side with the next message.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from engine_mlx.distributed.wire import (
    Link,
    Message,
    Op,
    Rows,
    error_text,
    forward_message,
    forward_rows,
)
from engine_mlx.errors import EngineError


class PipelineError(EngineError):
    """A stage failed or its rank is gone: the request ends with this message."""

    status = 503  # the server's answer: the model is unavailable, not the request wrong


WATCH_SECONDS = 0.5  # how often the watchdog looks at a message under way
ANSWER_SECONDS = 2.0  # time to answer the request under way before a broken pipeline exits


class PipelineClient:
    """Sends rank 0's messages around the ring and takes the replies."""

    def __init__(
        self,
        link: Link,
        gone: Callable[[], str | None] | None = None,
        timeout: float = 60.0,
    ) -> None:
        """``gone``: which rank has stopped, where this machine can tell (None: none has);
        ``timeout``: seconds a message may take before the pipeline counts as broken."""
        self.link = link
        self._keys = itertools.count(1)
        self._garbage: list[Message] = []
        self._gone = gone
        self.timeout = timeout
        self.failure: str | None = None
        # What to do when a message never comes back (MLX's receive cannot be interrupted):
        # by default say why and exit; the server first answers the request under way.
        self.on_stuck: Callable[[str], None] = exit_with
        self._since: float | None = None  # when the message under way was sent
        threading.Thread(target=self._watch, name="pipeline-watchdog", daemon=True).start()

    def key(self) -> int:
        return next(self._keys)

    def release(self, op: Op, key: int = 0, a: int = 0) -> None:
        """A finalizer's: queued, sent before the next message (finalizers run on any
        thread, and a send is the engine thread's)."""
        self._garbage.append(Message(op, key, a))

    def send(self, message: Message) -> None:
        self._guard()
        self._since = time.monotonic()
        try:
            while self._garbage:
                self.link.send(self._garbage.pop(0))
            self.link.send(message)
        except RuntimeError as exc:
            self._fail(exc)
        finally:
            self._since = None

    def forward(self, key: int, rows: Rows) -> Rows:
        self.send(forward_message(key, rows))
        self._since = time.monotonic()
        try:
            reply = self.link.receive(self.timeout)
        except RuntimeError as exc:
            self._fail(exc)
        finally:
            self._since = None
        if reply.op is Op.ERROR:
            self.failure = error_text(reply)
            raise PipelineError(self.failure)
        return forward_rows(reply)

    def _watch(self) -> None:
        """A message under way whose rank is gone, or that takes over ``timeout``, will
        never come back: MLX would wait for it forever."""
        while self.failure is None:
            time.sleep(WATCH_SECONDS)
            since = self._since
            if since is None:
                continue
            gone = self._gone() if self._gone is not None else None
            if gone is None and time.monotonic() - since < self.timeout:
                continue
            why = gone or f"no answer from the other ranks in {self.timeout:.0f} s"
            if self._since is since:  # still the same message
                self.failure = f"the model's pipeline broke: {why}; restart it with mlx.launch"
                self.on_stuck(self.failure)

    def stop(self) -> None:
        """Every stage exits (best effort: a stage already gone is not waited for)."""
        if self.failure is None:
            with contextlib.suppress(PipelineError):
                self.send(Message(Op.STOP))

    def _guard(self) -> None:
        if self.failure is not None:
            raise PipelineError(self.failure)

    def _fail(self, exc: Exception) -> Any:
        where = None
        for _ in range(10):  # a rank's connection closes a moment before its process is gone
            where = self._gone() if self._gone is not None else None
            if where is not None:
                break
            time.sleep(0.05)
        self.failure = f"the model's pipeline broke: {where or exc}; restart it with mlx.launch"
        # A ring cannot be joined again: once the request under way has its answer, exit.
        exit_soon(self.failure)
        raise PipelineError(self.failure) from exc


def exit_with(message: str) -> None:
    """Say why, and exit at once (the engine's thread may be stuck inside MLX)."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    os._exit(3)


def exit_soon(message: str) -> None:
    """Say why now (a launcher may end this process first), and exit once the request under
    way has had time for its answer; a command that ends first exits with its own code."""
    print(f"error: {message}; stopping", file=sys.stderr, flush=True)
    timer = threading.Timer(ANSWER_SECONDS, os._exit, [3])
    timer.daemon = True
    timer.start()


class RemoteSnapshot:
    """A snapshot of a remote cache set, kept on the stages under its key."""

    def __init__(self, client: PipelineClient, offset: int) -> None:
        self.key, self.offset = client.key(), offset
        weakref.finalize(self, client.release, Op.FREE_SNAPSHOT, 0, self.key)


class RemoteState:
    """The prompt cache's kept copy of a remote cache set (``KVCache.state``'s stand-in)."""

    def __init__(self, client: PipelineClient, offset: int, trimmable: bool) -> None:
        self.client, self.offset, self.trimmable = client, offset, trimmable
        self.key = client.key()
        weakref.finalize(self, client.release, Op.FREE_KEPT, 0, self.key)


class RemoteCaches:
    """The other ranks' caches for one of rank 0's cache lists; ``offset`` mirrors theirs."""

    meta_state = None

    def __init__(self, client: PipelineClient, trimmable: bool, kept: RemoteState | None = None):
        self.client, self.trimmable = client, trimmable
        self.key = client.key()
        if kept is None:
            self.offset = 0
            client.send(Message(Op.NEW, self.key))
        else:
            self.offset = kept.offset
            client.send(Message(Op.FROM_KEPT, self.key, kept.key))
        weakref.finalize(self, client.release, Op.FREE, self.key)

    def forward(self, rows: Rows) -> Rows:
        out = self.client.forward(self.key, rows)
        self.offset += rows.hidden.shape[1]
        return out

    def is_trimmable(self) -> bool:
        return self.trimmable

    def trim(self, n: int) -> int:
        n = min(self.offset, n)
        self.client.send(Message(Op.TRIM, self.key, n))
        self.offset -= n
        return n

    def compact(self, start: int, keep: list[int]) -> None:
        body = np.asarray(keep, np.float32)
        self.client.send(Message(Op.COMPACT, self.key, start, ints=len(keep), body=body))
        self.offset = start + len(keep)

    def snapshot(self) -> RemoteSnapshot:
        snap = RemoteSnapshot(self.client, self.offset)
        self.client.send(Message(Op.SNAPSHOT, self.key, snap.key))
        return snap

    def restore(self, snap: RemoteSnapshot) -> None:
        self.client.send(Message(Op.RESTORE, self.key, snap.key))
        self.offset = snap.offset

    @property
    def state(self) -> RemoteState:
        kept = RemoteState(self.client, self.offset, self.trimmable)
        self.client.send(Message(Op.KEEP, self.key, kept.key))
        return kept

    @classmethod
    def from_state(cls, state: RemoteState) -> RemoteCaches:
        return cls(state.client, state.trimmable, kept=state)
