"""The HTTP routes (Starlette) and the launcher (uvicorn).

Safe by default: it binds to the loopback address; any other address needs an API key, which
every ``/v1`` request must then present (``Authorization: Bearer KEY``). Before any route runs,
``guard`` refuses foreign Host names and web pages, bodies that are not JSON, too big or too
slow. Requests are checked (``requests``) before they queue, so a bad one is refused at once
with an OpenAI-style error, never half-way through a stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine_mlx.config import GenerationConfig
from engine_mlx.errors import ContextOverflowError, EngineError
from engine_mlx.events import Error, Event, Finished, Tokens
from engine_mlx.modes import Mode
from engine_mlx.server.access import AccessPolicy, is_loopback
from engine_mlx.server.guard import BODY_TIMEOUT_S, MAX_BODY_BYTES, RequestGuard
from engine_mlx.server.requests import (
    ApiError,
    CompletionRequest,
    check_model,
    parse_completion,
    parse_json,
)
from engine_mlx.server.responses import ResponseBuilder
from engine_mlx.server.runner import Job, JobQueue, QueueFull
from engine_mlx.session import Session

__all__ = ["MAX_BODY_BYTES", "Server", "run_server", "uvicorn_server"]

RETRY_AFTER_S = 2
# More at once get uvicorn's 503. Each holds a 64 KB read buffer and at most one body (8 MB)
# while the guard reads it; one model serves one request at a time, so 32 is plenty.
MAX_CONNECTIONS = 32
REASONING_FORMATS = ("deepseek", "none")


class Server:
    """The routes over the runner's session; the runner serialises the generations."""

    @property
    def session(self) -> Session:
        session = self.runner.session
        if session is None:
            raise ApiError(503, "No model is loaded yet.", kind="server_error")
        return session

    @property
    def model_name(self) -> str:
        session = self.runner.session
        return session.target.spec.name if session is not None else ""

    def __init__(
        self,
        runner: JobQueue,
        *,
        base_config: GenerationConfig | None = None,
        api_key: str | None = None,
        reasoning_format: str = "deepseek",
        access: AccessPolicy | None = None,
        max_body: int = MAX_BODY_BYTES,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        if reasoning_format not in REASONING_FORMATS:
            raise ValueError(f"reasoning format must be one of {', '.join(REASONING_FORMATS)}")
        self.reasoning_format = reasoning_format
        self.runner = runner
        self.base_config = base_config or GenerationConfig(mode=Mode.AUTO)
        self.api_key = api_key
        self.created = int(time.time())
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{model:path}", self.model, methods=["GET"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
        ]
        guard = Middleware(
            RequestGuard,
            policy=access or AccessPolicy(),
            max_body=max_body,
            body_timeout_s=body_timeout_s,
        )
        # Pages that passed the guard (local ones, those allowed by name) may read the replies.
        cors = Middleware(
            CORSMiddleware, allow_origins=["*"], allow_methods=["GET", "POST"], allow_headers=["*"]
        )
        self.app = Starlette(routes=routes, middleware=[guard, cors], lifespan=self._lifespan)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        self.runner.close()

    # ---- routes ----------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        """Up or not, for anyone; what it serves only for those holding the key."""
        if self._guarded(request) is not None:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "ok", "model": self.model_name})

    async def models(self, request: Request) -> Response:
        cards = [self._model_card()] if self.model_name else []
        return self._guarded(request) or JSONResponse({"object": "list", "data": cards})

    async def model(self, request: Request) -> Response:
        if denied := self._guarded(request):
            return denied
        if request.path_params["model"] != self.model_name:
            return _error(ApiError(404, "No such model here.", code="model_not_found"))
        return JSONResponse(self._model_card())

    async def chat_completions(self, request: Request) -> Response:
        return await self._complete(request, chat=True)

    async def completions(self, request: Request) -> Response:
        return await self._complete(request, chat=False)

    # ---- the work --------------------------------------------------------------------------

    def _model_card(self) -> dict[str, Any]:
        return {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "flashchat",
        }

    def _guarded(self, request: Request) -> Response | None:
        """The 401 response when a key is required and not presented, else None."""
        if self.api_key is None:
            return None
        header = request.headers.get("authorization", "")
        presented = header[7:] if header.lower().startswith("bearer ") else ""
        if hmac.compare_digest(presented.encode(), self.api_key.encode()):
            return None
        return _error(
            ApiError(
                401,
                "Missing or wrong API key (send 'Authorization: Bearer KEY').",
                kind="authentication_error",
                code="invalid_api_key",
            )
        )

    async def _complete(self, request: Request, *, chat: bool) -> Response:
        if denied := self._guarded(request):
            return denied
        try:
            req = await self._parse(request, chat)
        except ApiError as exc:
            return _error(exc)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event | None] = asyncio.Queue()

        def emit(event: Event | None) -> None:
            with contextlib.suppress(RuntimeError):  # shutting down: nobody is listening
                loop.call_soon_threadsafe(events.put_nowait, event)

        job = Job(req.prompt_ids, req.config, emit)
        try:
            self.runner.submit(job)
        except QueueFull:
            error = ApiError(
                429,
                "The server is busy with other requests; retry shortly.",
                kind="rate_limit_error",
                code="queue_full",
            )
            return _error(error, headers={"Retry-After": str(RETRY_AFTER_S)})
        tokenizer = self.session.target.tokenizer
        markers = (
            getattr(tokenizer, "think_start", None) or "<think>",
            getattr(tokenizer, "think_end", None) or "</think>",
        )
        builder = ResponseBuilder(self.model_name, chat, self.reasoning_format, markers)
        if req.stream:
            stream = _stream(job, events, builder, req)
            return StreamingResponse(stream, media_type="text/event-stream")
        return await self._collect(request, job, events, builder, req)

    async def _parse(self, request: Request, chat: bool) -> CompletionRequest:
        body = parse_json(await request.body())  # read (and bounded) by the guard
        check_model(body, self.session.target.spec.name)
        req = parse_completion(body, self.session.target, self.base_config, chat=chat)
        prompt_field = "messages" if chat else "prompt"
        try:
            self.session.check_fits(len(req.prompt_ids))
        except ContextOverflowError as exc:
            raise ApiError(
                400, str(exc), param=prompt_field, code="context_length_exceeded"
            ) from None
        except EngineError as exc:
            raise ApiError(400, str(exc), param=prompt_field) from None
        try:
            self.session.check_available(req.config.validate())
        except EngineError as exc:
            raise ApiError(400, str(exc), param="mode") from None
        return req

    async def _collect(
        self,
        request: Request,
        job: Job,
        events: asyncio.Queue[Event | None],
        builder: ResponseBuilder,
        req: CompletionRequest,
    ) -> Response:
        """Wait for the whole reply; a client that leaves first cancels its generation at
        once: its disconnect is awaited beside the events (not polled between them, which a
        steady flow of tokens would put off until the reply ends)."""
        watcher = asyncio.create_task(_cancel_on_disconnect(request, job))
        finished: Finished | None = None
        error: Error | None = None
        try:
            while (event := await events.get()) is not None:
                if isinstance(event, Finished):
                    finished = event
                elif isinstance(event, Error):
                    error = event
        finally:
            watcher.cancel()
        if watcher.done() and not watcher.cancelled():
            return Response(status_code=499)  # nobody is listening
        if finished is None or finished.reason == "cancelled":
            message = error.message if error else "The generation did not finish."
            return _error(ApiError(error.status if error else 500, message, kind="server_error"))
        mode = str(req.config.mode)
        reply = builder.complete(
            finished.text, finished.reason, finished.stats, mode, finished.reasoning
        )
        return JSONResponse(reply)


async def _cancel_on_disconnect(request: Request, job: Job) -> None:
    """Cancel ``job`` when its client disconnects (the body is read; nothing else comes)."""
    while (await request.receive())["type"] != "http.disconnect":
        continue
    job.cancel.set()


async def _stream(
    job: Job,
    events: asyncio.Queue[Event | None],
    builder: ResponseBuilder,
    req: CompletionRequest,
) -> AsyncIterator[str]:
    """Server-sent events: the text as it is committed, then the finish chunk (with the
    statistics), the usage chunk if asked for, and ``[DONE]``. Leaving early cancels."""
    inline = InlineReasoning(builder)
    try:
        if builder.chat:
            yield _sse(builder.chunk(role=True))
        while (event := await events.get()) is not None:
            if isinstance(event, Tokens) and builder.reasoning_format == "none":
                if text := inline.text(event.reasoning, event.text, event.part):
                    yield _sse(builder.chunk(text))
            elif isinstance(event, Tokens) and (event.text or event.reasoning):
                if event.reasoning and builder.chat:
                    yield _sse(builder.chunk(reasoning=event.reasoning))
                if event.text:
                    yield _sse(builder.chunk(event.text))
            elif isinstance(event, Finished) and event.reason != "cancelled":
                mode = str(req.config.mode)
                yield _sse(builder.final_chunk(event.reason, event.stats, mode, req.include_usage))
                if req.include_usage:
                    yield _sse(builder.usage_chunk(event.stats, mode))
            elif isinstance(event, Error):
                yield _sse(ApiError(event.status, event.message, kind="server_error").body())
        yield "data: [DONE]\n\n"
    finally:
        job.cancel.set()  # a no-op once finished; stops the generation if the client left


class InlineReasoning:
    """``--reasoning-format none`` while streaming: reasoning goes into the content between
    the model's markers, each written once where the reasoning starts and ends."""

    def __init__(self, builder: ResponseBuilder) -> None:
        self.start, self.end = builder.markers
        self.open = False

    def text(self, reasoning: str, answer: str, part: str) -> str:
        out = ""
        if reasoning:
            out += ("" if self.open else self.start) + reasoning
            self.open = True
        if self.open and (answer or part == "answer"):
            out, self.open = out + self.end, False
        return out + answer


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def _error(exc: ApiError, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


def uvicorn_server(server: Server, **bind: Any) -> Any:
    """The uvicorn server ``serve`` and the app's "Serve on localhost" both run (``bind``:
    host and port, or neither when the caller hands it a bound socket)."""
    import uvicorn

    config = uvicorn.Config(
        server.app, log_level="warning", limit_concurrency=MAX_CONNECTIONS, **bind
    )
    return uvicorn.Server(config)


def run_server(server: Server, host: str, port: int, announce: Callable[[str], None]) -> None:
    """Serve until interrupted (uvicorn handles Ctrl+C and SIGTERM)."""
    if not is_loopback(host) and server.api_key is None:
        raise EngineError(
            f"Refusing to serve on {host} without an API key: anyone on the network could use "
            "this machine. Set FLASHCHAT_API_KEY or pass --api-key-file FILE (clients send "
            "the key as a Bearer token), or bind to 127.0.0.1."
        )
    shown = f"[{host}]" if ":" in host else host
    announce(f"Serving {server.model_name} on http://{shown}:{port}/v1 (Ctrl+C stops)")
    uvicorn_server(server, host=host, port=port).run()
