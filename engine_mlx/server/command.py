"""``python -m engine_mlx serve``: its options, where the API key comes from, and the launch.

The key: ``--api-key-file FILE`` or ``FLASHCHAT_API_KEY``, which other users cannot read, are
the recommended ways; ``--api-key KEY`` still works but shows the key to anyone who lists the
machine's processes (``ps``), so it prints a warning.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from engine_mlx.arguments import (
    add_speculation,
    config_from_args,
    resolve_model,
    speculators_from_args,
)
from engine_mlx.errors import EngineError
from engine_mlx.modes import Mode
from engine_mlx.server.access import HOSTS_ENV, ORIGINS_ENV

KEY_ENV = "FLASHCHAT_API_KEY"


def add_serve_command(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="serve the model over an OpenAI-compatible HTTP API")
    serve.add_argument("--model", type=Path, default=None, help="model folder (default: demo)")
    serve.add_argument("--host", default="127.0.0.1", help="other than loopback needs a key")
    serve.add_argument("--port", type=int, default=8080)
    key = serve.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key-file",
        type=Path,
        default=None,
        help=f"a file holding the key clients must send as 'Authorization: Bearer' (or set "
        f"{KEY_ENV})",
    )
    key.add_argument(
        "--api-key", default=None, help=f"the key itself (visible in `ps`: prefer {KEY_ENV})"
    )
    serve.add_argument(
        "--allowed-hosts",
        default=None,
        help=f"host names besides localhost and the bound address that requests may name, "
        f"comma-separated ('*.example.com', '*': any; default: ${HOSTS_ENV})",
    )
    serve.add_argument(
        "--allowed-origins",
        default=None,
        help=f"web pages besides local ones that may use the server, comma-separated "
        f"('https://app.example.com', 'https://*.example.com', '*'; default: ${ORIGINS_ENV})",
    )
    serve.add_argument("--mode", default=Mode.AUTO.value, choices=[m.value for m in Mode])
    serve.add_argument(
        "--max-queue", type=int, default=4, help="requests that may wait (more get 429)"
    )
    add_speculation(serve)
    serve.add_argument(
        "--thinking-budget",
        type=int,
        default=None,
        help="a thinking model's reasoning tokens before its end marker is forced (a request's "
        "thinking_budget overrides)",
    )
    serve.add_argument(
        "--reasoning-format",
        choices=["deepseek", "none"],
        default="deepseek",
        help="deepseek: reasoning in reasoning_content (and reasoning); none: in the content, "
        "between the model's markers",
    )


def api_key(args: argparse.Namespace) -> str | None:
    """The key from ``--api-key-file``, ``--api-key`` or ``FLASHCHAT_API_KEY`` (in that order);
    None when none is set."""
    if args.api_key_file is not None:
        try:
            text = args.api_key_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise EngineError(f"cannot read the API key file {args.api_key_file}: {exc}") from None
        key = text.strip()
        if not key or len(key.split()) != 1:
            raise EngineError(
                f"the API key file {args.api_key_file} must hold the key on one line, alone."
            )
        return key
    if args.api_key is not None:
        print(
            f"warning: --api-key shows the key to every user of this machine (ps); set "
            f"{KEY_ENV} or use --api-key-file instead.",
            file=sys.stderr,
        )
        return args.api_key or None
    return os.environ.get(KEY_ENV, "").strip() or None


def answer_and_exit(runner: Any, message: str) -> None:
    """The model's pipeline will never answer (a rank is gone mid-forward): the request
    under way gets the error (503) now, then the server exits saying why."""
    from engine_mlx.distributed.remote_caches import exit_soon
    from engine_mlx.events import Error

    job = runner.current
    if job is not None:
        job.emit(Error(message, 503))
        job.emit(None)
    exit_soon(message)


def serve_command(args: argparse.Namespace) -> int:
    from engine_mlx.api import load_target
    from engine_mlx.server.access import AccessPolicy, is_loopback
    from engine_mlx.server.app import Server, run_server
    from engine_mlx.server.requests import DEFAULT_MAX_TOKENS
    from engine_mlx.server.runner import EngineRunner
    from engine_mlx.session import Session

    key = api_key(args)
    if not is_loopback(args.host) and not key:  # before the model loads
        raise EngineError(
            f"Refusing to serve on {args.host} without an API key: set {KEY_ENV} or pass "
            "--api-key-file FILE, or bind to 127.0.0.1."
        )
    if args.thinking_budget is not None and args.thinking_budget < 0:
        raise EngineError("--thinking-budget must be 0 or more tokens.")
    base = config_from_args(
        args,
        mode=Mode(args.mode),
        max_tokens=DEFAULT_MAX_TOKENS,
        thinking_budget=args.thinking_budget,
    )

    def build() -> Session:  # on the server's engine thread, which owns all MLX work
        target = load_target(resolve_model(args.model))
        spec = speculators_from_args(args, target)
        session = Session(target, spec.drafter, spec.mtp, spec.mtp_reason, reuse_prompt=True)
        if base.mode is Mode.AUTO and base.policy == "expected":
            session.step_costs()  # measured (or read from the cache) now, not in a request
        return session

    runner = EngineRunner(build, args.max_queue)
    session = runner.wait_ready()  # raises what went wrong loading the model
    if session.target.pipeline is not None:  # the model spans several processes
        session.target.pipeline.on_stuck = lambda message: answer_and_exit(runner, message)
    server = Server(
        runner,
        base_config=base,
        api_key=key,
        reasoning_format=args.reasoning_format,
        access=AccessPolicy.from_options(args.host, args.allowed_hosts, args.allowed_origins),
    )
    run_server(server, args.host, args.port, lambda line: print(line, file=sys.stderr, flush=True))
    return 0
