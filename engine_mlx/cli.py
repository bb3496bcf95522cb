"""Command line: ``python -m engine_mlx generate | bench | import-gguf | demo | info`` and
the training commands (``engine_mlx.training.commands``).

The ``generate --json`` output is a stable contract: one JSON object per event, the last one
``{"event": "finished", "tokens": [...], "text": ..., "stats": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from engine_mlx.arguments import (
    add_path,
    add_sampling,
    add_speculation,
    apply_path,
    config_from_args,
    resolve_model,
    speculators_from_args,
)
from engine_mlx.backend import backend_info
from engine_mlx.chat import check_messages
from engine_mlx.errors import EngineError
from engine_mlx.modes import Mode
from engine_mlx.server.command import add_serve_command, serve_command
from engine_mlx.training.commands import COMMANDS as TRAINING_COMMANDS
from engine_mlx.training.commands import add_training_commands, run_training_command
from engine_mlx.version import version


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine_mlx", description=__doc__)
    parser.add_argument("--version", action="version", version=f"FlashChat {version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="generate text from a prompt")
    gen.add_argument("--model", type=Path, default=None, help="model folder (default: demo)")
    src = gen.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text")
    src.add_argument(
        "--prompt-file", type=Path, help="a text file, or a JSON list of chat messages"
    )
    add_sampling(gen)
    add_path(gen)
    gen.add_argument("--mode", default=Mode.AR.value, choices=[m.value for m in Mode])
    add_speculation(gen)
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    gen.add_argument(
        "--no-thinking",
        action="store_true",
        help="a thinking model answers without reasoning (the template's enable_thinking=false)",
    )
    gen.add_argument(
        "--thinking-budget",
        type=int,
        default=None,
        help="a thinking model's end-of-reasoning marker is forced after N reasoning tokens",
    )
    gen.add_argument(
        "--loop-guard",
        choices=["on", "off"],
        default="off",
        help="on: stop a reply that keeps repeating one short cycle of tokens (reason "
        "'repetition'); the tokens before the stop are unchanged",
    )
    gen.add_argument("--system", default=None, help="system prompt (chat only)")
    tpl = gen.add_mutually_exclusive_group()
    tpl.add_argument("--chat", dest="chat", action="store_true", default=None)
    tpl.add_argument("--raw", dest="chat", action="store_false")
    gen.add_argument("--json", action="store_true", help="one JSON object per event")

    bench = sub.add_parser("bench", help="measure prefill / decode speed against mlx-lm")
    bench.add_argument("--model", type=Path, default=None)
    add_path(bench)
    bench.add_argument(
        "--modes", default=None, help=f"comma list of {', '.join(Mode)} (default ar; suite: all)"
    )
    bench.add_argument(
        "--widths",
        default=None,
        help="widths for the speculative modes (default 1; suite: its own)",
    )
    add_speculation(bench)
    bench.add_argument(
        "--depths",
        default=None,
        help="comma list (default 0,1024; suite: its own; --forward-cost: 0,1024,4096)",
    )
    bench.add_argument("--max-tokens", type=int, default=128)
    bench.add_argument(
        "--repeats", type=int, default=None, help="rounds of every cell (default 3; suite: 1)"
    )
    bench.add_argument("--no-baseline", action="store_true", help="skip mlx-lm")
    bench.add_argument("--json-out", type=Path, default=None)
    bench.add_argument(
        "--server-overhead",
        action="store_true",
        help="a `serve` process against in-process generation, interleaved (first --modes)",
    )
    bench.add_argument(
        "--forward-cost",
        action="store_true",
        help="time one target forward over 1-32 tokens at each depth (no generation)",
    )
    bench.add_argument(
        "--sampler-cost",
        action="store_true",
        help="time the sampler alone: each setting, 1-16 rows, two vocabulary sizes (no model)",
    )
    bench.add_argument(
        "--suite", default=None, choices=["standard", "reduced"], help="modes x depths x categories"
    )
    bench.add_argument(
        "--categories",
        default=None,
        help="suite: comma list of math,code,prose; acceptance: of the prompt set's categories",
    )
    bench.add_argument(
        "--acceptance",
        action="store_true",
        help="tau, acceptance and tok/s of every mode on the held-out conversations, greedy "
        "and sampled at the app's defaults",
    )
    bench.add_argument(
        "--prompts",
        type=Path,
        default=None,
        help="acceptance: a JSONL prompt set (default: resources/bench/heldout.jsonl)",
    )
    bench.add_argument(
        "--temp",
        type=float,
        default=None,
        help="acceptance: 0 = greedy only, T = sampled at T only (default: both, at 0.7)",
    )
    bench.add_argument(
        "--seeds", type=int, default=3, help="acceptance: sampled replies per prompt and mode"
    )
    bench.add_argument(
        "--plot-out",
        type=Path,
        default=None,
        help="suite: a PNG of tok/s by depth; bench: auto's predicted vs realised tokens/step",
    )
    bench.add_argument("--draft-lm", type=Path, default=None, help="suite: mlx-lm draft model")
    bench.add_argument(
        "--llama-gguf", type=Path, default=None,
        help="suite: the GGUF llama.cpp's plain decoding is timed on (default: the one the "
        "model was imported from)",
    )  # fmt: skip
    bench.add_argument(
        "--baseline-depths",
        default=None,
        help="suite: depths at which the external DFlash baselines run (they prefill every "
        "run themselves; default all)",
    )
    bench.add_argument(
        "--bench-envs",
        type=Path,
        default=None,
        help="suite: venvs of the external DFlash baselines (default .bench-envs/; "
        "scripts/setup_bench_envs.sh)",
    )

    imp = sub.add_parser("import-gguf", help="import a .gguf into a model folder")
    imp.add_argument("gguf", type=Path)
    imp.add_argument("out", type=Path)
    imp.add_argument(
        "--dtype", default="float16", choices=["float16", "bfloat16", "float32", "quantized"],
        help="quantized: Q4_0, Q4_1, Q8_0 matrices kept as the file holds them, the rest float16",
    )  # fmt: skip
    imp.add_argument(
        "--quantize", type=int, choices=[4, 8], default=None,
        help="write the import MLX-quantized at 4 or 8 bits (groups of 64)",
    )  # fmt: skip

    quant = sub.add_parser(
        "quantize", help="an MLX-quantized copy of a model folder (as mlx_lm.convert -q)"
    )
    quant.add_argument("model", type=Path, help="model folder or library name")
    quant.add_argument("--bits", type=int, choices=[4, 8], required=True)
    quant.add_argument("--group", type=int, choices=[32, 64, 128], default=64)
    quant.add_argument("--out", type=Path, default=None, help="default: <model>-<bits>bit, beside")

    exp = sub.add_parser(
        "export-drafter",
        help="a drafter as llama.cpp takes it: a GGUF, or a folder for its converter",
    )
    exp.add_argument("drafter", type=Path, help="drafter folder or drafter .gguf")
    exp.add_argument("--out", type=Path, required=True, help="folder to write into")
    exp.add_argument("--format", choices=["gguf", "hf"], default="gguf")
    exp.add_argument("--type", choices=["f32", "f16", "q8_0"], default="f16", dest="qtype")
    exp.add_argument(
        "--target-gguf", type=Path, default=None, help="gguf: the target's .gguf (its tokenizer)"
    )

    init = sub.add_parser("init-drafter", help="write a randomly initialised DFlash2 drafter")
    init.add_argument("--model", type=Path, default=None, help="target folder (default: demo)")
    init.add_argument("--out", type=Path, required=True)
    init.add_argument("--layers", type=int, default=2)
    init.add_argument("--block", type=int, default=8)
    init.add_argument("--conv", type=int, default=4, help="local convolution kernel (0: v1)")
    init.add_argument("--seed", type=int, default=0)

    add_training_commands(sub)

    pull = sub.add_parser("pull", help="download a model from the hub into the library")
    pull.add_argument(
        "model", help="ORG/NAME or a https://huggingface.co/ link (or a folder, .gguf, MTP file)"
    )
    pull.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    pull.add_argument("--json", action="store_true", help="one JSON object per event")

    lst = sub.add_parser("list", help="list the library: models, drafters, MTP heads, pairings")
    lst.add_argument("--json", action="store_true", help="one JSON object")

    add_serve_command(sub)

    demo = sub.add_parser("demo", help="import the demo model if needed and print its folder")
    demo.add_argument(
        "--all",
        action="store_true",
        help="fetch and import every bundled model (set-up does this), one folder per line",
    )
    add_path(sub.add_parser("info", help="print the backend in use"))
    return parser


def _import_gguf(args: argparse.Namespace) -> int:
    """Import; with ``--quantize``, import at full precision into a scratch folder beside the
    destination, then quantize that into the destination."""
    from engine_mlx.models.gguf import import_gguf

    if args.quantize is None:
        print(import_gguf(args.gguf, args.out, dtype=args.dtype))
        return 0
    import tempfile

    from engine_mlx.models.quantize import quantize_folder

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out.parent, prefix=".importing-") as scratch:
        full = import_gguf(args.gguf, Path(scratch) / args.out.name, dtype="float32")
        print(quantize_folder(full, args.out, bits=args.quantize))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        apply_path(args)
        if "MLX_RANK" in os.environ:  # started by mlx.launch: one rank of a pipeline
            from engine_mlx.distributed.launch import check_command, join, run_stage

            pipeline = join()
            if pipeline is not None and pipeline.rank > 0:
                return run_stage(args.command, getattr(args, "model", None), pipeline)
            if pipeline is not None:
                check_command(args.command)
        return _run(args)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nCancelled.", file=sys.stderr)
        return 130
    finally:
        if "MLX_RANK" in os.environ:
            from engine_mlx.distributed.launch import leave

            leave()


def _run(args: argparse.Namespace) -> int:
    """The command, in this process (rank 0's part of a pipeline included)."""
    if args.command == "generate":
        return _generate(args)
    if args.command == "bench":
        if args.repeats is not None and args.repeats < 1:
            raise EngineError("--repeats must be at least 1")
        if args.acceptance:
            from engine_mlx.bench.acceptance import run_acceptance

            return run_acceptance(args)
        if args.suite:
            from engine_mlx.bench.suite import run_suite

            return run_suite(args)
        if args.sampler_cost:
            from engine_mlx.bench.sampler_cost import run_sampler_cost

            return run_sampler_cost(args)
        args.repeats = args.repeats or 3
        if args.forward_cost:
            from engine_mlx.bench.forward_cost import run_forward_cost

            return run_forward_cost(args)
        if args.server_overhead:
            from engine_mlx.bench.server_overhead import run_server_overhead

            return run_server_overhead(args)
        from engine_mlx.bench.run import run_bench

        return run_bench(args)
    if args.command == "import-gguf":
        return _import_gguf(args)
    if args.command == "quantize":
        from engine_mlx.models.quantize import default_destination, quantize_folder

        source = resolve_model(args.model)
        out = args.out or default_destination(source, args.bits)
        print(quantize_folder(source, out, bits=args.bits, group=args.group))
        return 0
    if args.command == "export-drafter":
        from engine_mlx.models.gguf.export_drafter import export_drafter

        print(
            export_drafter(
                args.drafter,
                args.out,
                form=args.format,
                qtype=args.qtype,
                tokenizer_gguf=args.target_gguf,
            )
        )
        return 0
    if args.command == "init-drafter":
        from engine_mlx.api import init_drafter

        print(
            init_drafter(
                resolve_model(args.model),
                args.out,
                layers=args.layers,
                block=args.block,
                conv=args.conv,
                seed=args.seed,
            )
        )
        return 0
    if args.command in TRAINING_COMMANDS:
        return run_training_command(args, resolve_model)
    if args.command == "pull":
        from engine_mlx.library.cli import pull_command

        return pull_command(args)
    if args.command == "list":
        from engine_mlx.library.cli import list_command

        return list_command(args)
    if args.command == "demo":
        return _demo_command(args)
    if args.command == "serve":
        return serve_command(args)
    print(backend_info().describe())
    return 0


def _demo_command(args: argparse.Namespace) -> int:
    from engine_mlx.demo import BUNDLED, ensure_demo_model, ensure_model, fetch_gguf

    if args.all:
        for model in BUNDLED.values():
            fetch_gguf(model, progress=lambda line: print(line, file=sys.stderr, flush=True))
            print(ensure_model(model), flush=True)
    print(ensure_demo_model())  # the form that decodes fastest here, measured once
    return 0


def read_prompt(args: argparse.Namespace) -> str | list[dict[str, str]]:
    """Prompt text, or chat messages when --prompt-file holds a JSON list."""
    if args.prompt is not None:
        return args.prompt
    name = args.prompt_file.name
    try:
        text = args.prompt_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise EngineError(f"cannot read prompt file {args.prompt_file}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise EngineError(
            f"{name} is not UTF-8 text (byte {exc.start}): save it as UTF-8 and try again."
        ) from exc
    if text.lstrip().startswith(("[", "{")):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            if text.lstrip().startswith("{"):
                return text  # prose or code that starts with a brace
            raise EngineError(f"{name} is not valid JSON: {exc}") from exc
        if not isinstance(data, list):
            raise EngineError(
                f"{name} holds a JSON object; a prompt file is plain text or a JSON list of "
                'chat messages ([{"role": "user", "content": "..."}]). To send JSON as text, '
                "pass it with --prompt."
            )
        return check_messages(data)
    return text


def _generate(args: argparse.Namespace) -> int:
    from engine_mlx.api import encode_prompt, load_target
    from engine_mlx.decoding.sampling import SamplingParams
    from engine_mlx.events import Error, Finished, ModeSwitch, Tokens, event_to_json
    from engine_mlx.session import Session

    target = load_target(resolve_model(args.model))
    spec = speculators_from_args(args, target)
    drafter, mtp, mtp_reason = spec.drafter, spec.mtp, spec.mtp_reason
    if args.mode == "mtp" and mtp is None:
        raise EngineError(f"MTP is unavailable: {mtp_reason}")
    kwargs = {"enable_thinking": False} if args.no_thinking else None
    ids = encode_prompt(
        target, read_prompt(args), chat=args.chat, system=args.system, template_kwargs=kwargs
    )
    try:
        sampling = SamplingParams(
            args.temp, args.top_k, args.top_p, args.min_p, args.seed, args.repetition_penalty
        )
    except ValueError as exc:
        raise EngineError(str(exc)) from exc
    config = config_from_args(
        args,
        sampling=sampling,
        stop_strings=tuple(args.stop),
        mode=args.mode,
        loop_guard=args.loop_guard == "on",
        thinking_budget=args.thinking_budget,
    )
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        session = Session(target, drafter, mtp, mtp_reason)
        for event in session.generate(ids, config, cancel):
            if args.json:
                print(json.dumps(event_to_json(event), ensure_ascii=False), flush=True)
            elif isinstance(event, Tokens):
                if event.reasoning:  # reasoning to stderr: stdout holds the answer alone
                    print(event.reasoning, end="", file=sys.stderr, flush=True)
                print(event.text, end="", flush=True)
            elif isinstance(event, ModeSwitch):
                print(f"\n[{event.from_mode} -> {event.to_mode}: {event.reason}]", file=sys.stderr)
            elif isinstance(event, Finished):
                s = event.stats
                print(
                    f"\n[{event.reason}] {s.generated_tokens} tokens, decode "
                    f"{s.decode_tps:.1f} tok/s, prefill {s.prefill_tps:.1f} tok/s, TTFT "
                    f"{s.ttft_s * 1000:.0f} ms, tau {s.tau:.2f}, acceptance "
                    f"{'-' if s.acceptance_rate is None else f'{s.acceptance_rate:.0%}'}, context "
                    f"{s.context_depth}/{s.max_context}",
                    file=sys.stderr,
                )
            if isinstance(event, Error):
                if not args.json:
                    print(f"error: {event.message}", file=sys.stderr)
                return 2
    finally:
        signal.signal(signal.SIGINT, previous)
    return 130 if cancel.is_set() else 0  # Ctrl+C: the shell's "interrupted", as `pull` does
