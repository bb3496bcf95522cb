"""Request bodies of the OpenAI API, checked field by field, turned into what the engine runs.

Fields the engine does not use (``user``, ``logprobs``, penalties…) are ignored, as OpenAI-
compatible servers do, so existing clients work unchanged; a field the engine uses with the
wrong type or range is a 400 that names it. ``mode`` (FlashChat's decoding mode) may be set
per request; clients send it with ``extra_body``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from engine_mlx.chat import ChatFormatter, check_messages
from engine_mlx.config import MAX_SEED, GenerationConfig
from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.errors import EngineError
from engine_mlx.models.target import TargetModel
from engine_mlx.modes import Mode, parse_mode

DEFAULT_MAX_TOKENS = 2048
MAX_STOPS = 4


class ApiError(Exception):
    """An error the client caused or must handle, with its HTTP status and OpenAI fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = (
            status,
            message,
            kind,
            param,
            code,
        )

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass(frozen=True)
class CompletionRequest:
    """A chat or text completion request, ready for the engine."""

    chat: bool
    prompt_ids: list[int]
    config: GenerationConfig
    stream: bool = False
    include_usage: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"The request body is not valid JSON: {exc}") from None
    except RecursionError:  # the decoder recurses per level: refuse, rather than fail with a 500
        raise ApiError(
            400, "The request body nests arrays or objects too deeply; no API field needs that."
        ) from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def check_model(body: dict[str, Any], served: str) -> None:
    model = _get(body, "model", str, required=True)
    if model != served:
        raise ApiError(
            404,
            f"The model '{model}' does not exist here; this server serves '{served}'.",
            param="model",
            code="model_not_found",
        )


def parse_completion(
    body: dict[str, Any], target: TargetModel, base: GenerationConfig, *, chat: bool
) -> CompletionRequest:
    """The request's prompt ids and generation config (``base``, the server's settings, with
    the request's length, sampling, stops and mode), or ApiError naming the bad field."""
    ids = _chat_ids(body, target) if chat else _text_ids(body, target)
    n = _get(body, "n", int, default=1)
    if n != 1:
        raise ApiError(400, "Only n=1 is supported.", param="n")
    stream = _get(body, "stream", bool, default=False)
    options = _get(body, "stream_options", dict, default=None) or {}
    include_usage = bool(options.get("include_usage", False))
    config = _config(body, base)
    return CompletionRequest(chat, ids, config, stream, include_usage and stream)


def _chat_ids(body: dict[str, Any], target: TargetModel) -> list[int]:
    messages = _get(body, "messages", list, required=True)
    if not messages:
        raise ApiError(400, "'messages' must hold at least one message.", param="messages")
    plain = [_message_text(m, i) for i, m in enumerate(messages)]
    kwargs = _get(body, "chat_template_kwargs", dict, default=None) or {}
    if not all(isinstance(key, str) for key in kwargs):
        raise ApiError(
            400, "'chat_template_kwargs' keys must be names.", param="chat_template_kwargs"
        )
    try:
        return ChatFormatter(target.tokenizer).encode_messages(check_messages(plain), kwargs)
    except EngineError as exc:
        raise ApiError(400, str(exc), param="messages") from None


def _message_text(message: Any, index: int) -> Any:
    """OpenAI allows ``content`` as a list of parts; text parts are joined, others refused."""
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    texts = []
    for part in message["content"]:
        if not isinstance(part, dict) or part.get("type") != "text":
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ApiError(
                400,
                f"Message {index + 1} holds a '{kind}' part; this model reads text only.",
                param=f"messages[{index}].content",
            )
        texts.append(str(part.get("text", "")))
    return {**message, "content": "".join(texts)}


def _text_ids(body: dict[str, Any], target: TargetModel) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError(400, "'prompt' must be a string.", param="prompt")
    ids = ChatFormatter(target.tokenizer).encode_raw(prompt)
    if not ids:
        raise ApiError(
            400,
            "'prompt' is empty: send at least some text to continue.",
            param="prompt",
            code="empty_prompt",
        )
    return ids


def _config(body: dict[str, Any], base: GenerationConfig) -> GenerationConfig:
    max_tokens = _get(body, "max_completion_tokens", int, default=None)
    if max_tokens is None:
        max_tokens = _get(body, "max_tokens", int, default=DEFAULT_MAX_TOKENS)
    if max_tokens < 1:
        raise ApiError(400, "'max_tokens' must be at least 1.", param="max_tokens")
    temperature = _get(body, "temperature", float, default=1.0)
    if not 0.0 <= temperature <= 2.0:
        raise ApiError(400, "'temperature' must be between 0 and 2.", param="temperature")
    top_p = _get(body, "top_p", float, default=1.0)
    if not 0.0 < top_p <= 1.0:
        raise ApiError(400, "'top_p' must be in (0, 1].", param="top_p")
    seed = _get(body, "seed", int, default=None)
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise ApiError(
            400, f"'seed' must be an integer from 0 to {MAX_SEED} (2^64 - 1).", param="seed"
        )
    penalty = _get(body, "repetition_penalty", float, default=1.0)  # vLLM's and llama.cpp's name
    if not 0.0 < penalty <= 10.0:
        raise ApiError(
            400, "'repetition_penalty' must be in (0, 10] (1 is off).", param="repetition_penalty"
        )
    stops = _stops(body.get("stop"))
    mode_name = _get(body, "mode", str, default=None)
    mode = base.mode if mode_name is None else parse_mode(mode_name)
    if mode is None:
        names = ", ".join(m.value for m in Mode)
        raise ApiError(400, f"Unknown mode '{mode_name}' (use one of {names}).", param="mode")
    return replace(
        base,
        max_tokens=max_tokens,
        sampling=SamplingParams(
            temperature=temperature, top_p=top_p, seed=seed, repetition_penalty=penalty
        ),
        stop_strings=stops,
        mode=mode,
        loop_guard=_get(body, "loop_guard", bool, default=False),
        thinking_budget=_budget(body, base.thinking_budget),
    )


def _budget(body: dict[str, Any], default: int | None) -> int | None:
    """``thinking_budget``: reasoning tokens before the end marker is forced (a thinking
    model only); the server's ``--thinking-budget`` when absent."""
    budget = _get(body, "thinking_budget", int, default=default)
    if budget is not None and budget < 0:
        raise ApiError(400, "'thinking_budget' must be 0 or more tokens.", param="thinking_budget")
    return budget


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise ApiError(400, "'stop' must be a string or a list of strings.", param="stop")
    if len(stops) > MAX_STOPS:
        raise ApiError(400, f"'stop' may hold at most {MAX_STOPS} strings.", param="stop")
    return tuple(stops)


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _get(
    body: dict[str, Any], key: str, kind: type, *, required: bool = False, default: Any = None
) -> Any:
    if key not in body or body[key] is None:
        if required:
            raise ApiError(400, f"'{key}' is required.", param=key)
        return default
    value = body[key]
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        want = _TYPE_NAMES.get(kind, f"a JSON {kind.__name__}")
        raise ApiError(400, f"'{key}' must be {want}.", param=key)
    return value
