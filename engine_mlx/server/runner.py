"""One generation at a time, in arrival order, on the thread that owns the engine.

The engine runs one generation at a time (one KV cache, and MLX work off the event loop), so
requests wait in a bounded queue: a full queue is refused at once (the client gets a 429 and
retries) rather than piling up work nobody may still want. Each job carries its own cancel
event: a client that disconnects sets it, and the generation stops at its next step.

``JobQueue`` is the bookkeeping; how a job reaches the engine's thread is its subclass's
business: ``EngineRunner`` (``serve``) owns a thread of its own and builds the session on it
(MLX streams belong to the thread that made them, so one thread loads, calibrates and runs
the model), while the app hands jobs to its engine worker, so chat and server take turns.
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


class JobQueue:
    """Admits jobs (``max_waiting`` may wait behind the one running) and runs each on the
    engine's thread (``execute``); ``on_event`` sees every event of every job."""

    def __init__(
        self, max_waiting: int = 4, on_event: Callable[[Event], None] | None = None
    ) -> None:
        self.on_event = on_event
        self.current: Job | None = None  # the job running now
        self._slots = threading.Semaphore(max_waiting + 1)  # waiting + the one running

    @property
    def session(self) -> Session | None:
        """The session jobs run on (None: no model loaded yet)."""
        raise NotImplementedError

    def submit(self, job: Job) -> None:
        if not self._slots.acquire(blocking=False):
            raise QueueFull
        self._dispatch(job)

    def close(self) -> None:
        """Stop taking work (jobs already admitted still end with None)."""

    def _dispatch(self, job: Job) -> None:
        """Hand ``job`` to the engine's thread, which calls ``execute`` with it."""
        raise NotImplementedError

    def execute(self, job: Job) -> None:
        """On the engine's thread: run the job (unless its client already left), then free
        its slot."""
        session = self.session
        try:
            if job.cancel.is_set():
                return
            if session is None:
                job.emit(Error("No model is loaded."))
                return
            self.current = job
            for event in session.generate(job.prompt_ids, job.config, job.cancel):
                job.emit(event)
                if self.on_event is not None:
                    self.on_event(event)
        except Exception as exc:  # the server stays up; the client hears what went wrong
            job.emit(Error(f"The generation failed: {exc}", getattr(exc, "status", 500)))
        finally:
            self.current = None
            job.emit(None)
            self._slots.release()


class EngineRunner(JobQueue):
    """A thread of its own that builds the session with ``build``, then runs jobs."""

    def __init__(
        self,
        build: Callable[[], Session],
        max_waiting: int = 4,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        super().__init__(max_waiting, on_event)
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._ready = threading.Event()
        self._session: Session | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(
            target=self._work, args=(build,), name="flashchat-engine", daemon=True
        )
        self._thread.start()

    @property
    def session(self) -> Session | None:
        return self._session

    def wait_ready(self) -> Session:
        """The session, once built (re-raises what went wrong building it)."""
        self._ready.wait()
        if self._session is None:
            raise self._failure or RuntimeError("the engine stopped")
        return self._session

    def _dispatch(self, job: Job) -> None:
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
            self.execute(job)
