"""Installs run here, on their own QThread: hub requests, downloads, copies, GGUF imports.

None of that may block the GUI thread (a listing can take seconds on a slow link, a download
hours), and none of it shares the engine worker's thread, so a chat keeps generating while a
model downloads. Jobs run one at a time in the order they were asked for (the thread's event
loop queues them). Cancelling is a ``threading.Event`` per job, set directly from the GUI
thread because this thread is busy inside the job; a job cancelled while still queued ends
as soon as it starts.
"""

from __future__ import annotations

import threading
import traceback
import uuid
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from engine_mlx.errors import EngineError
from engine_mlx.library.download import DownloadOptions
from engine_mlx.library.hub import RepoPlan
from engine_mlx.library.install import add
from engine_mlx.library.progress import OperationCancelled, Progress
from engine_mlx.library.sources import Source


class LibraryWorker(QObject):
    """Every slot runs on the worker thread; results come back as signals."""

    planned = Signal(str, dict)  # job id, plan (summary, sizes, kind)
    progress = Signal(str, dict)  # job id, Progress.to_json()
    installed = Signal(str, str)  # job id, installed folder
    failed = Signal(str, str)  # job id, message for a person
    cancelled = Signal(str, str)  # job id, message (what was kept)

    def __init__(self, root: Path | None = None, options: DownloadOptions | None = None) -> None:
        super().__init__()
        self.root = root
        self.options = options
        self._cancels: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.job_thread_id: int | None = None

    def new_job(self) -> str:
        """A job id with its cancel flag (call on the GUI thread before requesting)."""
        job = uuid.uuid4().hex[:12]
        with self._lock:
            self._cancels[job] = threading.Event()
        return job

    def cancel(self, job: str) -> None:
        """Thread-safe: called from the GUI thread."""
        with self._lock:
            event = self._cancels.get(job)
        if event is not None:
            event.set()

    def cancel_all(self) -> None:
        with self._lock:
            events = list(self._cancels.values())
        for event in events:
            event.set()

    @Slot(str, object)
    def install(self, job: str, source: Source) -> None:
        self.job_thread_id = threading.get_ident()
        with self._lock:
            cancel = self._cancels.setdefault(job, threading.Event())
        if cancel.is_set():  # cancelled while it waited its turn
            self.cancelled.emit(job, f"{source.describe()}: cancelled before it started.")
            with self._lock:
                self._cancels.pop(job, None)
            return

        def on_plan(plan: RepoPlan) -> None:
            self.planned.emit(job, {**plan.to_json(), "summary": plan.summary()})

        def on_progress(p: Progress) -> None:
            self.progress.emit(job, p.to_json())

        try:
            path = add(
                source,
                self.root,
                progress=on_progress,
                cancel=cancel,
                options=self.options,
                on_plan=on_plan,
            )
        except OperationCancelled as exc:
            self.cancelled.emit(job, str(exc))
        except EngineError as exc:
            self.failed.emit(job, str(exc))
        except MemoryError:
            self.failed.emit(job, "Out of memory while installing: close other apps.")
        except Exception as exc:  # anything else still reaches the window, not just stderr
            traceback.print_exc()
            self.failed.emit(job, f"Could not add {source.describe()}: {exc}")
        else:
            self.installed.emit(job, str(path))
        finally:
            with self._lock:
                self._cancels.pop(job, None)
