"""The one place where engine events become Qt signals.

The worker lives on its own QThread: loading models and generating (all MLX work) happen
there, never on the GUI thread. Per token it does what the CLI does and no more: it appends
the step's text to a list and emits it as often as the window draws (``pace_updates``; 30
times a second at most). Its signals reach the window queued (the window lives on the GUI
thread), so emitting never waits for the window to draw; the window paces its drawing on its
own (``stream_pacer``). Stopping is a
``threading.Event`` set directly from the GUI thread, because the worker's event loop is
busy while it generates.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

import engine_mlx  # noqa: F401  (the BLAS before mlx)
from app.messages import LiveUpdate, ModelInfo
from engine_mlx.api import encode_prompt, load_speculators, load_target
from engine_mlx.auto.step_costs import cache_file as step_cost_cache
from engine_mlx.backend import backend_info
from engine_mlx.companions import NO_DRAFTER
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.errors import EngineError
from engine_mlx.events import Error, Event, Finished, ModeSwitch, Started, Tokens
from engine_mlx.modes import Mode, available_modes
from engine_mlx.remote import PREFIX as REMOTE_PREFIX
from engine_mlx.remote import Endpoint, RemoteSession, list_models
from engine_mlx.session import Session

UPDATE_INTERVAL_S = 1 / 30


class EngineWorker(QObject):
    """Owns the model, the drafter and the session; every slot runs on the worker thread."""

    # Payloads are frozen dataclasses (the engine's events, ModelInfo, LiveUpdate): they cross
    # the thread boundary as they are, and no slot reads a string-keyed dict.
    model_loaded = Signal(object)  # ModelInfo
    started = Signal(object)  # events.Started
    segments = Signal(object)  # LiveUpdate
    mode_switched = Signal(object)  # events.ModeSwitch
    finished = Signal(object)  # events.Finished
    error = Signal(str)
    notice = Signal(str)  # a passing note for the status bar ("" when it is over)
    served = Signal(object)  # an event of a generation the local server runs (speed panel)

    def __init__(self) -> None:
        super().__init__()
        self._session: Session | None = None
        self._cancel = threading.Event()
        self.generation_thread_id: int | None = None
        self._served_emit = 0.0
        self._remote: RemoteSession | None = None
        self._kernels_reported: set[str] = set()
        self.update_interval_s = UPDATE_INTERVAL_S  # see ``pace_updates``

    def _report_switched_off(self, off: dict[str, str]) -> None:
        """A GPU kernel that failed its first-use check (``kernels.self_check``): said once, in
        the status bar; its reference op answers instead, and replies do not change."""
        new = {op: why for op, why in off.items() if op not in self._kernels_reported}
        if new:
            self._kernels_reported.update(new)
            named = "; ".join(f"{op.replace('_', ' ')}: {why}" for op, why in sorted(new.items()))
            self.notice.emit(f"GPU kernel switched off, its reference runs instead ({named})")

    @property
    def session(self) -> Session | None:
        """The loaded model's session (read by the local server to check requests)."""
        return self._session

    @Slot(object, object)
    def run_server_job(self, runner: Any, job: Any) -> None:
        """A local server request (``app.local_server``), in turn with the chat's."""
        runner.execute(job)

    def report_served(self, event: Any) -> None:
        """Every event of a served generation, on this thread; text events at most ~30 a
        second, like the chat's."""
        if isinstance(event, Tokens):
            now = time.perf_counter()
            if now - self._served_emit < UPDATE_INTERVAL_S:
                return
            self._served_emit = now
        if isinstance(event, Started | Tokens | Finished):
            self.served.emit(event)

    def pace_updates(self, seconds: float) -> None:
        """Send text at most every ``seconds`` (and never more than ~30 times a second): the
        window's frames are paced (``stream_pacer``), and an update it would only keep costs
        the GUI thread a wake-up. Called from the GUI thread: a float stored, read per step."""
        self.update_interval_s = max(UPDATE_INTERVAL_S, seconds)

    def cancel(self) -> None:
        """Thread-safe: called from the GUI thread."""
        self._cancel.set()

    @Slot(str, str)
    def load_model(self, path: str, drafter_path: str = "") -> None:
        if path.startswith(REMOTE_PREFIX):
            self._connect(path)
            return
        self._remote = None
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
        warning = ""
        try:
            speculators = load_speculators(target, drafter_path or None)
        except EngineError as exc:  # the target alone is still worth having
            warning = f"{exc} The model runs without this drafter."
            speculators = load_speculators(target, NO_DRAFTER)
        drafter, mtp = speculators.drafter, speculators.mtp
        drafter_path = str(speculators.drafter_path or "")
        # The conversation so far is prefilled once: the next turn prefills only what is new.
        self._session = Session(target, drafter, mtp, speculators.mtp_reason, reuse_prompt=True)
        backend = backend_info(target.dtype)
        self.model_loaded.emit(
            ModelInfo(
                name=target.spec.name,
                path=str(target.spec.path),
                backend=backend.summary(),
                backend_detail=backend.describe(),
                max_context=target.spec.max_context,
                modes=available_modes(drafter=drafter is not None, mtp=mtp is not None),
                drafter=Path(drafter_path).name if drafter_path else "",
                drafter_path=str(Path(drafter_path)) if drafter_path else "",
                mtp=speculators.mtp_source or "",
                mtp_reason=speculators.mtp_reason or "",
                thinks=target.thinking is not None,
                decodes_on_cpu=backend.device == "cpu",
            )
        )
        if warning:
            self.error.emit(warning)
        if not step_cost_cache(target).exists():  # auto mode's step costs: measured once
            self.notice.emit(
                f"Measuring how fast {target.spec.name} decodes on this machine (once, a few "
                "seconds)…"
            )
        self._session.step_costs()
        self.notice.emit("")

    def _connect(self, spec: str) -> None:
        """A model on a remote OpenAI-compatible server: checked, then used like a local one."""
        try:
            endpoint = Endpoint.from_spec(spec)
            if endpoint.model not in list_models(endpoint.base_url, endpoint.api_key):
                raise EngineError(f"{endpoint.host} no longer offers {endpoint.model}.")
        except EngineError as exc:
            self.error.emit(str(exc))
            return
        self._session = None
        self._remote = RemoteSession(endpoint)
        self.model_loaded.emit(
            ModelInfo(
                name=endpoint.label,
                path=spec,
                backend=f"Remote: {endpoint.host}",
                backend_detail=f"OpenAI-compatible server at {endpoint.base_url}; tok/s and "
                "first-token time measured from its stream, tau and acceptance where it "
                "reports them.",
                max_context=0,
                modes=(Mode.AUTO,),
            )
        )

    @Slot(list, dict)
    def generate(self, messages: list[dict[str, str]], settings: dict[str, Any]) -> None:
        self.generation_thread_id = threading.get_ident()
        self._cancel.clear()
        if self._session is None and self._remote is None:
            self.error.emit("No model is loaded yet.")
            return
        try:
            config = self._config(settings)
            kwargs = (
                {"enable_thinking": bool(settings["thinking"])} if "thinking" in settings else None
            )
            if self._remote is not None:
                self._stream(self._remote.generate(messages, config, self._cancel, kwargs))
            elif self._session is not None:
                target = self._session.target
                kwargs = kwargs if target.thinking is not None else None
                ids = encode_prompt(target, messages, template_kwargs=kwargs)
                self._stream(self._session.generate(ids, config, self._cancel))
        except (EngineError, ValueError) as exc:
            self.error.emit(str(exc))
        except MemoryError:
            self.error.emit("Out of memory: close other apps or choose a smaller model.")
        except Exception as exc:
            traceback.print_exc()
            self.error.emit(f"Generation failed: {exc}")

    def _config(self, settings: dict[str, Any]) -> GenerationConfig:
        """The window chose the mode (``modes.fallback``); the session refuses one whose
        companion is missing, so a mismatch is an error, never a silent change."""
        block = int(settings.get("block_size") or 0) or None
        threshold = int(settings.get("auto_threshold") or 0)
        return GenerationConfig(
            max_tokens=int(settings.get("max_tokens", 512)),
            sampling=SamplingParams(
                temperature=float(settings.get("temperature", 0.0)),
                top_p=float(settings.get("top_p", 1.0)),
                top_k=int(settings.get("top_k", 0)),
                seed=settings.get("seed"),
                repetition_penalty=float(settings.get("repetition_penalty", 1.0)),
            ),
            mode=settings.get("mode", Mode.AUTO),
            width=int(settings.get("draft_width", 1)),
            block_size=block,
            policy="threshold" if threshold > 0 else "expected",
            auto_threshold=threshold or 4096,
            loop_guard=bool(settings.get("loop_guard", False)),
            ignore_eos=bool(settings.get("ignore_eos", False)),  # benchmarks: a set length
            thinking_budget=int(settings["thinking_budget"]) or None
            if settings.get("thinking_budget")
            else None,
        )

    def _stream(self, events: Iterator[Event]) -> None:
        pending: list[tuple[str, bool]] = []
        thought = ""  # reasoning not yet sent
        shown = 0  # characters already sent to the window
        latest: Tokens | None = None
        last_emit = 0.0
        for event in events:
            if isinstance(event, Started):
                self.started.emit(event)
            elif isinstance(event, Tokens):
                latest = event
                pending.extend(seg for seg in event.segments if seg[0])
                thought += event.reasoning
                now = time.perf_counter()
                if now - last_emit >= self.update_interval_s:
                    self.segments.emit(LiveUpdate(tuple(pending), latest, thought))
                    shown += sum(len(t) for t, _ in pending)
                    pending, thought, last_emit = [], "", now
            elif isinstance(event, ModeSwitch):
                self.mode_switched.emit(event)
            elif isinstance(event, Finished):
                shown += sum(len(t) for t, _ in pending)
                tail = event.text[shown:]  # the detokenizer's last bytes, never in a step
                if tail:
                    pending.append((tail, False))
                if pending or thought:
                    self.segments.emit(LiveUpdate(tuple(pending), latest, thought))
                self.finished.emit(event)
                self._report_switched_off(event.stats.kernels.get("switched_off") or {})
            elif isinstance(event, Error):
                self.error.emit(event.message)
