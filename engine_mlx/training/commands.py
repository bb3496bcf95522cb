"""The training commands of the CLI: ``make-dataset``, ``train-drafter``, ``train-mtp``,
``train-draft-lm`` (the standalone draft model for the mlx-lm baseline), ``export-pair`` (a
drafter and MTP head in the shipped layout), ``plot-training`` (a model card's curves) and
``train-pair`` (all of it within a time budget: ``training.pipeline``).

Each prints one JSON line per checkpoint (step, loss, seconds) and can be interrupted and
rerun with the same arguments to resume.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from engine_mlx.decoding.draft_vocab import DEFAULT_SIZE
from engine_mlx.errors import EngineError

COMMANDS = (
    "make-dataset",
    "train-drafter",
    "train-mtp",
    "train-draft-lm",
    "export-pair",
    "plot-training",
    "train-pair",
)


def _log(record: dict) -> None:
    print(json.dumps(record), flush=True)


def add_training_commands(sub: argparse._SubParsersAction) -> None:
    ds = sub.add_parser("make-dataset", help="record the target's continuations for training")
    ds.add_argument("--model", type=Path, default=None, help="target folder (default: demo)")
    ds.add_argument("--out", type=Path, required=True, help="dataset folder")
    ds.add_argument("--corpora", type=Path, default=None, help="folder with prose/ and code/")
    ds.add_argument("--shards", type=int, default=24)
    ds.add_argument("--batch", type=int, default=48)
    ds.add_argument("--new-tokens", type=int, default=128)
    ds.add_argument("--prompt-lengths", default="64,128,256")
    ds.add_argument(
        "--teacher-forced",
        action="store_true",
        help="replies are corpus text ('continue this'), the target's distribution over them "
        "the teacher: one forward per batch instead of one per token (--new-tokens: reply length)",
    )
    ds.add_argument("--capture", default="", help="drafter context layers (default: 4 evenly)")
    ds.add_argument(
        "--mix",
        default="",
        help="share of batches per category, e.g. math=0.35,chat=0.35,code=0.2,prose=0.1 "
        "(default: math=0.2,chat=0.15,code=0.4,prose=0.25)",
    )
    ds.add_argument("--seed", type=int, default=0)

    td = sub.add_parser("train-drafter", help="train a DFlash2 drafter on a dataset")
    td.add_argument("--model", type=Path, default=None, help="target folder (default: demo)")
    td.add_argument("--data", type=Path, required=True, help="folder from make-dataset")
    td.add_argument("--out", type=Path, required=True, help="drafter folder")
    td.add_argument("--steps", type=int, default=1000)
    td.add_argument("--layers", type=int, default=3)
    td.add_argument("--mlp", type=int, default=0, help="draft MLP width (0: the target's)")
    td.add_argument("--block", type=int, default=8)
    td.add_argument("--conv", type=int, default=4)
    td.add_argument("--lr", type=float, default=6e-4)
    td.add_argument("--sequences", type=int, default=8, help="sequences per step")
    td.add_argument("--anchors", type=int, default=16, help="blocks per sequence")
    td.add_argument("--seed", type=int, default=0)
    td.add_argument("--warm-start", type=Path, default=None, help="start from this trained drafter")
    td.add_argument(
        "--reference",
        type=int,
        default=0,
        metavar="GROUP",
        help="llama.cpp's DFlash2: dynamic convolutions over channel groups of this size "
        "(--conv taps) and the candidate selector",
    )
    td.add_argument(
        "--draft-vocab",
        type=int,
        default=DEFAULT_SIZE,
        help="tokens it may propose, the dataset's most frequent (0: all; llama.cpp runs only "
        "drafters without one)",
    )
    td.add_argument("--selector-rank", type=int, default=16)
    td.add_argument("--selector-top-k", type=int, default=8)

    tm = sub.add_parser("train-mtp", help="train an MTP head on a dataset")
    tm.add_argument("--model", type=Path, default=None, help="target folder (default: demo)")
    tm.add_argument("--data", type=Path, required=True, help="folder from make-dataset")
    tm.add_argument("--out", type=Path, required=True, help="the head's .safetensors file")
    tm.add_argument("--steps", type=int, default=600)
    tm.add_argument("--positions", type=int, default=1024, help="predictions per step")
    tm.add_argument("--lr", type=float, default=1e-4)
    tm.add_argument("--hidden", default="pre", choices=["post", "pre"], help="measured: pre")
    tm.add_argument("--seed", type=int, default=0)

    tl = sub.add_parser("train-draft-lm", help="train a small draft LM (mlx-lm baseline)")
    tl.add_argument("--model", type=Path, default=None, help="target folder (default: demo)")
    tl.add_argument("--data", type=Path, required=True, help="folder from make-dataset")
    tl.add_argument("--out", type=Path, required=True, help="the draft model's folder")
    tl.add_argument("--steps", type=int, default=300)
    tl.add_argument("--layers", type=int, default=2)
    tl.add_argument("--lr", type=float, default=3e-4)
    tl.add_argument("--sequences", type=int, default=8, help="sequences per step")
    tl.add_argument("--seed", type=int, default=0)

    ex = sub.add_parser("export-pair", help="a trained drafter + MTP head, shipped layout")
    ex.add_argument("--name", required=True, help="the target's folder name")
    ex.add_argument("--drafter", type=Path, required=True, help="train-drafter's folder")
    ex.add_argument("--mtp", type=Path, default=None, help="train-mtp's file (omit: none)")
    ex.add_argument("--out", type=Path, required=True, help="e.g. resources/companions/NAME")
    ex.add_argument(
        "--mtp-steps", type=int, default=None, help="the head's best draft length, as measured"
    )

    tp = sub.add_parser(
        "train-pair", help="data, drafter and MTP head for a target within a time budget"
    )
    tp.add_argument("--model", type=Path, default=None, help="target folder (default: demo)")
    tp.add_argument("--corpora", type=Path, default=None, help="folder with prose/ and code/")
    tp.add_argument("--work", type=Path, required=True, help="resumable work folder")
    tp.add_argument("--out", type=Path, required=True, help="where the pair is exported")
    tp.add_argument("--scale", choices=["toy", "gpu"], default="gpu", help="toy: CPU seconds")
    tp.add_argument("--budget-s", type=float, default=None, help="default: the scale's")

    pt = sub.add_parser("plot-training", help="plot trainers' history files (loss curves)")
    pt.add_argument("runs", nargs="+", help="LABEL=HISTORY.json (a trainer's history file)")
    pt.add_argument("--out", type=Path, required=True, help="the .png to write")
    pt.add_argument("--window", type=int, default=25, help="steps averaged per point")


def run_training_command(args: argparse.Namespace, resolve_model: Callable) -> int:
    if args.command == "plot-training":
        return _plot(args)
    if args.command == "export-pair":
        from engine_mlx.training.export import export_pair

        try:
            print(export_pair(args.name, args.drafter, args.mtp, args.out, args.mtp_steps))
        except FileNotFoundError as exc:
            raise EngineError(str(exc)) from exc
        return 0
    from engine_mlx.api import load_target

    target = load_target(resolve_model(args.model))
    try:
        if args.command == "make-dataset":
            return _make_dataset(args, target)
        if args.command == "train-pair":
            from engine_mlx.training.pipeline import PLANS, train_pair

            plan = PLANS[args.scale]
            print(train_pair(target, args.corpora, args.work, args.out, plan, args.budget_s, _log))
            return 0
        if args.command == "train-drafter":
            from engine_mlx.training.dflash import DrafterTrainConfig, train_drafter

            config = DrafterTrainConfig(
                steps=args.steps,
                layers=args.layers,
                mlp=args.mlp,
                block=args.block,
                conv=args.conv,
                lr=args.lr,
                sequences=args.sequences,
                anchors=args.anchors,
                seed=args.seed,
                warm_start=str(args.warm_start or ""),
                conv_group=args.reference,
                selector_rank=args.selector_rank,
                selector_top_k=args.selector_top_k,
                draft_vocab=args.draft_vocab,
            )
            train_drafter(target, args.data, args.out, config, log=_log)
        elif args.command == "train-draft-lm":
            from engine_mlx.training.draft_lm import DraftLMTrainConfig, train_draft_lm

            lm_config = DraftLMTrainConfig(
                steps=args.steps,
                layers=args.layers,
                lr=args.lr,
                sequences=args.sequences,
                seed=args.seed,
            )
            train_draft_lm(target, args.data, args.out, lm_config, log=_log)
        else:
            from engine_mlx.training.mtp import MTPTrainConfig, train_mtp

            config = MTPTrainConfig(
                steps=args.steps,
                positions=args.positions,
                lr=args.lr,
                hidden=args.hidden,
                seed=args.seed,
            )
            train_mtp(target, args.data, args.out, config, log=_log)
    except (ValueError, FileNotFoundError) as exc:
        raise EngineError(str(exc)) from exc
    print(args.out)
    return 0


def _make_dataset(args: argparse.Namespace, target) -> int:
    from engine_mlx.models.dflash import default_target_layer_ids
    from engine_mlx.training.dataset import DatasetConfig, build_dataset
    from engine_mlx.training.prompts import PromptBuilder, default_sources

    n_layers = len(target.layers)
    capture = (
        tuple(int(x) for x in args.capture.split(","))
        if args.capture
        else tuple(default_target_layer_ids(n_layers, 4))
    )
    config = DatasetConfig(
        shards=args.shards,
        batch=args.batch,
        new_tokens=args.new_tokens,
        prompt_lengths=tuple(int(x) for x in args.prompt_lengths.split(",")),
        capture=capture,
        seed=args.seed,
        teacher_forced=args.teacher_forced,
        **({"mix": parse_mix(args.mix)} if args.mix else {}),
    )
    builder = PromptBuilder(target.tokenizer, default_sources(args.corpora), "train")
    build_dataset(target, builder, args.out, config, log=_log)
    print(args.out)
    return 0


def parse_mix(text: str) -> dict[str, float]:
    """``math=0.35,chat=0.35,...`` -> the categories' shares of batches (any positive
    weights: they are relative)."""
    from engine_mlx.training.prompts import CATEGORIES

    mix: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in CATEGORIES:
            raise EngineError(
                f"--mix: {part.strip()!r} is not CATEGORY=SHARE with a category among "
                f"{', '.join(CATEGORIES)}"
            )
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if not 0 < share < float("inf"):
            raise EngineError(
                f"--mix: the share of {name} must be a positive number, not {value!r}"
            )
        mix[name] = share
    return mix


def _plot(args: argparse.Namespace) -> int:
    from engine_mlx.training.curves import plot_histories, read_history

    runs = {}
    for run in args.runs:
        label, sep, path = run.rpartition("=")
        if not sep:
            label = Path(path).stem
        try:
            runs[label] = read_history(Path(path))
        except (OSError, ValueError, KeyError) as exc:
            raise EngineError(f"{path}: not a trainer's history file ({exc})") from exc
    print(plot_histories(runs, args.out, args.window))
    return 0
