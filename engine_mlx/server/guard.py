"""The checks every request passes before a route runs (an ASGI middleware): Host and Origin
(``access``), a JSON body for POST, and the body's size and arrival time.

Why here and not in the routes: a refused request must cost the server nothing — no body read
past the limit, no model work — and the routes of ``serve`` and the app's "Serve on localhost"
then share one set of checks. A body is read once, here, up to ``max_body`` bytes (an oversized
``Content-Length`` is refused before a byte is read; a chunked body stops at the limit), then
handed to the route; what the client sends after that is its disconnect, which the routes
watch. Refusals of a body close the connection, so the rest of an upload is never read —
except a declared body up to ``DRAIN_FACTOR`` times the limit: that one is read and thrown
away first, because a client still writing when the server closes gets a reset that destroys
the 413 on its way (the lingering-close problem), and a user of an SDK should read "over
8 MB", not "connection reset".
Starlette's RequestBodyLimitMiddleware (recent releases only) answers in plain text and leaves
the connection open for the rest of the upload.
"""

from __future__ import annotations

import asyncio

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine_mlx.server.access import AccessPolicy
from engine_mlx.server.requests import ApiError

MAX_BODY_BYTES = 8 * 1024 * 1024
DRAIN_FACTOR = 4  # a declared oversized body up to this many limits is read, not kept
BODY_TIMEOUT_S = 30.0  # a body trickling in slower than this holds a connection for nothing
JSON_TYPE = "application/json"


class RequestGuard:
    """Refuses, with OpenAI's error body, what fails ``policy`` or the body rules."""

    def __init__(
        self,
        app: ASGIApp,
        policy: AccessPolicy,
        max_body: int = MAX_BODY_BYTES,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        self.app, self.policy = app, policy
        self.max_body, self.body_timeout_s = max_body, body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            self._check_headers(headers, scope["method"])
        except ApiError as exc:
            await _refuse(exc, scope, receive, send)
            return
        if scope["method"] == "POST":
            try:
                body = await self._read_body(headers, receive)
            except ApiError as exc:
                await _refuse(exc, scope, receive, send, close=True)
                return
            if body is None:  # the client left while sending
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    def _check_headers(self, headers: Headers, method: str) -> None:
        host = headers.get("host")
        if not self.policy.host_allowed(host):
            raise ApiError(
                403,
                f"This server does not answer to the host name '{host}' (a guard against DNS "
                "rebinding). Use http://127.0.0.1:PORT or http://localhost:PORT, or allow the "
                "name with --allowed-hosts (or FLASHCHAT_ALLOWED_HOSTS).",
                kind="permission_error",
                code="host_not_allowed",
            )
        origin = headers.get("origin")
        if not self.policy.origin_allowed(origin, host):
            raise ApiError(
                403,
                f"Requests from the web page at '{origin}' are refused. To let that page use "
                f"this server, start it with --allowed-origins {origin} (or set "
                "FLASHCHAT_ORIGINS).",
                kind="permission_error",
                code="origin_not_allowed",
            )
        if method == "POST":
            kind = headers.get("content-type", "")
            if kind.split(";", 1)[0].strip().lower() != JSON_TYPE:
                raise ApiError(
                    415,
                    f"Send the request body as JSON with 'Content-Type: {JSON_TYPE}' (this one "
                    f"was {repr(kind) if kind else 'not labelled'}).",
                    code="unsupported_media_type",
                )

    async def _read_body(self, headers: Headers, receive: Receive) -> bytes | None:
        """The whole body, or None when the client left; ApiError past the size or time."""
        declared = headers.get("content-length")
        if declared is not None and not declared.strip().isdigit():
            raise ApiError(400, f"Content-Length '{declared}' is not a number of bytes.")
        if declared is not None and int(declared) > self.max_body:
            if int(declared) <= DRAIN_FACTOR * self.max_body:
                try:  # read, so the refusal reaches a client still writing
                    if await self._body(receive, keep=False) is None:
                        return None
                except TimeoutError:
                    pass  # a body that stalls is refused all the same
            raise self._too_large()
        try:
            return await self._body(receive, keep=True)
        except TimeoutError:
            raise ApiError(
                408,
                f"The request body did not arrive within {self.body_timeout_s:g} s.",
                code="request_timeout",
            ) from None

    async def _body(self, receive: Receive, *, keep: bool) -> bytes | None:
        """The body as it arrives, kept up to the limit (ApiError past it) or thrown away;
        None when the client left; TimeoutError past the body timeout."""
        chunks: list[bytes] = []
        size = 0
        async with asyncio.timeout(self.body_timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                if keep:
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_body:
                        raise self._too_large()
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)

    def _too_large(self) -> ApiError:
        mb = self.max_body / 2**20
        return ApiError(
            413, f"The request body is over {mb:g} MB; send a shorter one.", code="body_too_large"
        )


async def _refuse(
    exc: ApiError, scope: Scope, receive: Receive, send: Send, *, close: bool = False
) -> None:
    headers = {"Connection": "close"} if close else None
    await JSONResponse(exc.body(), status_code=exc.status, headers=headers)(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the route the body already read, then what the client does next
    (its disconnect)."""
    delivered = False

    async def replayed() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
