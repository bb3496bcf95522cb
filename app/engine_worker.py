"""The one place where engine events become Qt signals.

The worker lives on its own QThread: loading a model and generating (all MLX work) happen
there, never on the GUI thread. Token events are coalesced to about 30 updates per second so
rendering cannot slow decoding. Stopping is a ``threading.Event`` set directly from the GUI
thread, because the worker's event loop is busy while it generates.
"""

from __future__ import annotations

import threading
import time
import traceback
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

import engine_mlx  # noqa: F401  (OpenBLAS before mlx)
from engine_mlx.api import encode_prompt, load_target
from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.errors import EngineError
from engine_mlx.events import Error, Finished, Started, Tokens
from engine_mlx.session import GenerationConfig, Session

UPDATE_INTERVAL_S = 1 / 30


class EngineWorker(QObject):
    """Owns the model and the session; every slot runs on the worker thread."""

    model_loaded = Signal(str, str)  # model name, backend description
    started = Signal(int)  # prompt tokens
    text_delta = Signal(str, float, int)  # text, live tok/s, context depth
    finished = Signal(str, dict)  # reason, stats
    error = Signal(str)

    def __init__(self) -> None:
        super().__init__()
        self._session: Session | None = None
        self._cancel = threading.Event()
        self.generation_thread_id: int | None = None

    def cancel(self) -> None:
        """Thread-safe: called from the GUI thread."""
        self._cancel.set()

    @Slot(str)
    def load_model(self, path: str) -> None:
        try:
            if not path:
                from engine_mlx.demo import ensure_demo_model

                path = str(ensure_demo_model())
            target = load_target(Path(path))
        except EngineError as exc:
            self.error.emit(str(exc))
            return
        except Exception as exc:  # anything else still reaches the window, not just stderr
            traceback.print_exc()
            self.error.emit(f"Could not load the model: {exc}")
            return
        self._session = Session(target)
        from engine_mlx.backend import backend_info

        self.model_loaded.emit(target.spec.name, backend_info(target.dtype).describe())

    @Slot(str, int, float)
    def generate(self, prompt: str, max_tokens: int, temperature: float) -> None:
        self.generation_thread_id = threading.get_ident()
        if self._session is None:
            self.error.emit("No model is loaded yet.")
            return
        self._cancel.clear()
        try:
            ids = encode_prompt(self._session.target, prompt)
            config = GenerationConfig(
                max_tokens=max_tokens, sampling=SamplingParams(temperature=temperature)
            )
            self._stream(ids, config)
        except EngineError as exc:
            self.error.emit(str(exc))
        except Exception as exc:
            traceback.print_exc()
            self.error.emit(f"Generation failed: {exc}")

    def _stream(self, ids: list[int], config: GenerationConfig) -> None:
        pending, shown, last_emit, live, depth = "", 0, 0.0, 0.0, 0
        for event in self._session.generate(ids, config, self._cancel):
            if isinstance(event, Started):
                self.started.emit(event.prompt_tokens)
            elif isinstance(event, Tokens):
                pending += event.text
                live, depth = event.live_tps, event.context_depth
                now = time.perf_counter()
                if pending and now - last_emit >= UPDATE_INTERVAL_S:
                    self.text_delta.emit(pending, live, depth)
                    shown += len(pending)
                    pending, last_emit = "", now
            elif isinstance(event, Finished):
                rest = event.text[shown:]  # coalesced text plus the detokenizer's tail
                if rest:
                    self.text_delta.emit(rest, live, depth)
                self.finished.emit(event.reason, event.stats.to_json())
            elif isinstance(event, Error):
                self.error.emit(event.message)
