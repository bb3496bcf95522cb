"""A model on another machine, behind any OpenAI-compatible endpoint, as a session the app can
use like a local one: the same events (``Started``, ``Tokens``, ``Finished``), measured from
the stream.

What the stream cannot say is left unknown rather than guessed: tok/s counts one token per
streamed chunk until the server's ``usage`` gives the true count; tau and acceptance come from
the server where it reports them (``remote_speculation``: FlashChat, llama.cpp, vLLM, SGLang),
else they stay empty. A vLLM or SGLang server is told apart by its model list, once: SGLang is
asked for its speculation details, and vLLM's ``/metrics`` counters are read around a reply
when the reply itself does not carry them. Plain HTTP (httpx), no MLX.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from engine_mlx.config import GenerationConfig
from engine_mlx.errors import EngineError
from engine_mlx.events import Error, Event, Finished, Started, Tokens
from engine_mlx.modes import Mode
from engine_mlx.remote_speculation import (
    REPORT_KEYS,
    Counts,
    counts_from_counters,
    server_kind,
    speculation_counts,
    vllm_counters,
)
from engine_mlx.stats import GenerationStats, StepStats

PREFIX = "remote:"  # a model-bar entry naming a remote model: PREFIX + endpoint JSON
CONNECT_TIMEOUT_S = 10.0
UNKNOWN = float("nan")  # tau the server does not report (clients show it as unknown)


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # ".../v1"
    model: str
    api_key: str = ""

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).netloc or self.base_url

    @property
    def label(self) -> str:
        return f"{self.model} @ {self.host}"

    def to_spec(self) -> str:
        return PREFIX + json.dumps(
            {"base_url": self.base_url, "model": self.model, "api_key": self.api_key}
        )

    @classmethod
    def from_spec(cls, spec: str) -> Endpoint:
        try:
            data = json.loads(spec.removeprefix(PREFIX))
            return cls(str(data["base_url"]), str(data["model"]), str(data.get("api_key", "")))
        except (ValueError, KeyError, TypeError) as exc:
            raise EngineError(f"The saved server connection is damaged ({exc}).") from None


def normalise_url(url: str) -> str:
    """``host:port`` or ``http://host:port`` (with or without ``/v1``) -> ``http://…/v1``."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url if url.endswith("/v1") else url + "/v1"


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def list_models(base_url: str, api_key: str = "") -> list[str]:
    """The model ids the server offers; EngineError saying why it could not be asked."""
    url = normalise_url(base_url)
    try:
        reply = httpx.get(url + "/models", headers=_headers(api_key), timeout=CONNECT_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise EngineError(f"Cannot reach {url}: {exc}") from None
    if reply.status_code == 401:
        raise EngineError(f"{url} wants an API key (or a different one).")
    if reply.status_code != 200:
        raise EngineError(f"{url}/models answered {reply.status_code}: {reply.text[:200]}")
    try:
        return [str(m["id"]) for m in reply.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise EngineError(f"{url}/models did not answer like an OpenAI-compatible API.") from None


def metrics_url(base_url: str) -> str:
    """The Prometheus page beside an OpenAI API: vLLM serves ``/metrics`` at its root."""
    return base_url.rstrip("/").removesuffix("/v1") + "/metrics"


class RemoteSession:
    """Generations on a remote model; ``generate`` takes chat messages (the server applies
    its own chat template) and yields the engine's events."""

    def __init__(self, endpoint: Endpoint, max_context: int = 0) -> None:
        self.endpoint = endpoint
        self.max_context = max_context  # unknown (0) unless the caller knows it
        self._kind: str | None = None  # "vllm", "sglang" or "" once the model list said
        # vLLM's /metrics is read around replies until it fails, has no speculation
        # counters, or the replies carry their own numbers
        self._read_metrics = True

    def _server_kind(self) -> str:
        """What the server is, asked once (its model list): only vLLM and SGLang get
        anything their own, so other servers see nothing they did not ask for."""
        if self._kind is None:
            url = self.endpoint.base_url + "/models"
            headers = _headers(self.endpoint.api_key)
            try:
                reply = httpx.get(url, headers=headers, timeout=CONNECT_TIMEOUT_S)
                if reply.status_code != 200:
                    return ""  # asked again next time: the chat request will say why
                self._kind = server_kind(reply.json(), self.endpoint.model)
            except (httpx.HTTPError, ValueError):
                return ""
        return self._kind

    def _counters(self) -> dict[str, float] | None:
        """vLLM's speculation counters now; None, and no more reading, where ``/metrics``
        cannot be read or has none. Never raises: the chat goes on without them."""
        url = metrics_url(self.endpoint.base_url)
        try:
            reply = httpx.get(
                url, headers=_headers(self.endpoint.api_key), timeout=CONNECT_TIMEOUT_S
            )
            counters = vllm_counters(reply.text, self.endpoint.model) if reply.is_success else {}
        except httpx.HTTPError:
            counters = {}
        if not counters:
            self._read_metrics = False
        return counters or None

    def generate(
        self,
        messages: Sequence[dict[str, str]],
        config: GenerationConfig,
        cancel: threading.Event | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> Iterator[Event]:
        """``template_kwargs`` go to the server's chat template (``chat_template_kwargs``,
        as llama-server, vLLM and FlashChat take it: ``enable_thinking``)."""
        cancel = cancel or threading.Event()
        sampling = config.sampling
        # Top-k and the repetition penalty are not OpenAI parameters (some servers refuse
        # unknown ones): a remote model samples with its server's own.
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": list(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": config.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if config.stop_strings:
            body["stop"] = list(config.stop_strings)
        if template_kwargs:
            body["chat_template_kwargs"] = dict(template_kwargs)
        if config.thinking_budget is not None:
            body["thinking_budget"] = config.thinking_budget
        try:
            kind = self._server_kind()
            if kind == "sglang":
                body["return_spec_tokens_details"] = True  # ignored by SGLang before it
            before = self._counters() if kind == "vllm" and self._read_metrics else None
            yield from self._stream(body, cancel, before)
        except httpx.HTTPError as exc:
            yield Error(f"The connection to {self.endpoint.host} failed: {exc}")

    def _stream(
        self, body: dict[str, Any], cancel: threading.Event, before: dict[str, float] | None
    ) -> Iterator[Event]:
        url = self.endpoint.base_url + "/chat/completions"
        t0 = time.perf_counter()
        first: float | None = None
        chunks = 0
        text: list[str] = []
        thoughts: list[str] = []
        reason = "eos"
        final: dict[str, Any] = {}
        started = False
        headers = _headers(self.endpoint.api_key)
        with httpx.stream("POST", url, json=body, headers=headers, timeout=None) as reply:
            if reply.status_code != 200:
                reply.read()
                yield Error(_error_message(reply))
                return
            for line in reply.iter_lines():
                if cancel.is_set():
                    reason = "cancelled"
                    break  # leaving the stream closes the connection: the server stops
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                if isinstance(chunk.get("error"), dict):  # the server failed mid-reply
                    yield Error(str(chunk["error"].get("message") or "The server failed."))
                    return  # not a finished reply: what came so far is kept as interrupted
                if not started:
                    started = True
                    yield Started(Mode.AUTO, 0, self.max_context, f"remote: {self.endpoint.host}")
                final.update({k: v for k, v in chunk.items() if k in REPORT_KEYS and v is not None})
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    piece = delta.get("content") or ""
                    # llama-server's --reasoning-format deepseek, vLLM, FlashChat's serve
                    thought = delta.get("reasoning_content") or delta.get("reasoning") or ""
                    if choice.get("finish_reason"):
                        reason = "max_tokens" if choice["finish_reason"] == "length" else "eos"
                    if not piece and not thought:
                        continue
                    now = time.perf_counter()
                    first = first or now
                    chunks += 1
                    text.append(piece)
                    thoughts.append(thought)
                    rate = (chunks - 1) / (now - first) if now > first else 0.0
                    yield Tokens(
                        text=piece,
                        token_ids=(),
                        from_draft=(),
                        step=StepStats(Mode.AUTO, committed=1, seconds=0.0),
                        live_tps=rate,
                        context_depth=0,
                        segments=((piece, False),) if piece else (),
                        tau=UNKNOWN,
                        reasoning=thought,
                        part="answer" if piece else "reasoning",
                    )
        end = time.perf_counter()
        counts = speculation_counts(final)
        if counts is not None:
            self._read_metrics = False  # the server reports per reply: no need to read /metrics
        elif before is not None and reason != "cancelled":
            after = self._counters()
            if after is not None:
                counts = counts_from_counters(before, after, _generated(final, chunks))
        stats = self._stats(final, chunks, t0, first, end, counts)
        yield Finished(reason, "".join(text), (), stats, "".join(thoughts))

    def _stats(
        self,
        final: dict[str, Any],
        chunks: int,
        t0: float,
        first: float | None,
        end: float,
        counts: Counts | None,
    ) -> GenerationStats:
        generated = _generated(final, chunks)
        prompt = int((final.get("usage") or {}).get("prompt_tokens") or 0)
        steps, drafted, accepted = counts or (0, 0, 0)
        decode_s = end - first if first is not None else 0.0
        return GenerationStats(
            prompt_tokens=prompt,
            generated_tokens=generated,
            steps=steps or generated,
            tau=generated / steps if steps else UNKNOWN,
            acceptance_rate=accepted / drafted if drafted else None,
            decode_tps=(generated - 1) / decode_s if decode_s > 0 and generated > 1 else 0.0,
            prefill_tps=0.0,
            ttft_s=(first - t0) if first is not None else 0.0,
            total_s=end - t0,
            context_depth=prompt + generated,
            max_context=self.max_context,
            drafted=drafted,
            tested=drafted,
            accepted=accepted,
            modes=dict((final.get("flashchat") or {}).get("modes") or {}),
        )


def _generated(final: dict[str, Any], chunks: int) -> int:
    """The reply's tokens: the server's count, else one per streamed chunk."""
    return int((final.get("usage") or {}).get("completion_tokens") or chunks)


def _error_message(reply: httpx.Response) -> str:
    try:
        message = reply.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = reply.text[:200]
    return f"The server answered {reply.status_code}: {message}"
