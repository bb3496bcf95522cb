"""One generation at a time, in arrival order, on a worker thread of its own.

The engine runs one generation at a time (one KV cache, and MLX work off the event loop), so
requests wait in a bounded queue: a full queue is refused at once (the client gets a 429 and
retries) rather than piling up work nobody may still want. Each job carries its own cancel
event: a client that disconnects sets it, and the generation stops at its next step.

The session is built on the worker thread too: MLX streams belong to the thread that made
them, so the model is loaded, calibrated and run by one thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from engine_mlx.config import GenerationConfig
from engine_mlx.events import Error, Event
from engine_mlx.session import Session


class QueueFull(Exception):
    """The queue already holds as many waiting requests as it may."""


@dataclass
class Job:
    prompt_ids: Sequence[int]
    config: GenerationConfig
    emit: Callable[[Event | None], None]  # every event, then None (thread-safe for the caller)
    cancel: threading.Event = field(default_factory=threading.Event)


class EngineRunner:
    """Runs jobs one by one on the session ``build`` makes (on the worker thread);
    ``max_waiting`` jobs may wait behind the one running. ``on_event`` sees every event of
    every job (the app's speed panel)."""

    def __init__(
        self,
        build: Callable[[], Session],
        max_waiting: int = 4,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        self.on_event = on_event
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._slots = threading.Semaphore(max_waiting + 1)  # waiting + the one running
        self._ready = threading.Event()
        self._session: Session | None = None
        self.current: Job | None = None  # the job running now
        self._failure: BaseException | None = None
        self._thread = threading.Thread(
            target=self._work, args=(build,), name="flashchat-engine", daemon=True
        )
        self._thread.start()

    @property
    def session(self) -> Session:
        """The session, once built (re-raises what went wrong building it)."""
        self._ready.wait()
        if self._session is None:
            raise self._failure or RuntimeError("the engine stopped")
        return self._session

    def submit(self, job: Job) -> None:
        if not self._slots.acquire(blocking=False):
            raise QueueFull
        self._jobs.put(job)

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)

    def _work(self, build: Callable[[], Session]) -> None:
        try:
            self._session = build()
        except BaseException as exc:  # handed to whoever asks for the session
            self._failure = exc
            return
        finally:
            self._ready.set()
        while (job := self._jobs.get()) is not None:
            try:
                if not job.cancel.is_set():  # its client left while it waited
                    self.current = job
                    self._run(job)
            finally:
                self.current = None
                job.emit(None)
                self._slots.release()

    def _run(self, job: Job) -> None:
        try:
            for event in self.session.generate(job.prompt_ids, job.config, job.cancel):
                job.emit(event)
                if self.on_event is not None:
                    self.on_event(event)
        except Exception as exc:  # the server stays up; the client hears what went wrong
            job.emit(Error(f"The generation failed: {exc}"))
