"""``bench --acceptance``: what each mode commits per step, and how fast it runs, on
conversations no drafter was trained or tuned on (``training.heldout``).

Every prompt is answered in every mode with real verification, greedy and sampled at the
app's defaults (several seeds), each reply to its end-of-turn token or ``--max-tokens``. The
modes of one prompt and setting run back to back, so their speed ratios share the machine's
state. Reported per prompt, per category and over all: tau over decoding steps (the prefill's
first token left out, so plain decoding is exactly 1), the acceptance rate, decode tok/s and
its ratio to plain decoding.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine_mlx.arguments import config_from_args, parse_modes, resolve_model, speculators_from_args
from engine_mlx.backend import backend_info
from engine_mlx.bench.measure import finished_reply, machine_description, shown_path
from engine_mlx.chat import ChatFormatter
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.errors import EngineError
from engine_mlx.models.target import TargetModel
from engine_mlx.modes import Mode
from engine_mlx.session import Session
from engine_mlx.stats import TIME_PARTS
from engine_mlx.training.heldout import HELDOUT_FILE, HeldOutPrompt, load_heldout

APP_SAMPLING = SamplingParams(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.05)
"""The app's default sampling (Qwen2.5's generation_config.json)."""
DEFAULT_MODES = "ar,dflash2,mtp,auto"
DEFAULT_SEEDS = 3


def sampling_settings(temp: float | None, seeds: int) -> list[tuple[str, SamplingParams]]:
    """Greedy and the app's sampling by default; ``--temp 0`` greedy only; ``--temp T`` the
    app's sampling at temperature T only. Sampled settings run once per seed."""
    sampled = [
        ("sampled", replace(APP_SAMPLING, temperature=temp or APP_SAMPLING.temperature, seed=s))
        for s in range(seeds)
    ]
    if temp is None:
        return [("greedy", SamplingParams()), *sampled]
    return [("greedy", SamplingParams())] if temp == 0 else sampled


def measure_reply(session: Session, ids: list[int], config: GenerationConfig) -> dict[str, Any]:
    """One reply, to its end or the token limit: the counts the summary adds up."""
    finished, _ = finished_reply(session, ids, config)
    s = finished.stats
    decode_tokens = max(s.generated_tokens - 1, 0)
    return {
        "tokens": s.generated_tokens,
        "decode_tokens": decode_tokens,
        "decode_steps": max(s.steps - 1, 0),
        "decode_s": decode_tokens / s.decode_tps if s.decode_tps > 0 else 0.0,
        "tested": s.tested,
        "accepted": s.accepted,
        "modes": dict(s.modes),
        "time_split": dict(s.time_split),
        "output": list(finished.tokens),
    }


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Totals per (setting, category, mode), and over all categories ("all"): tau, acceptance,
    tok/s, and tok/s over plain decoding's on the same replies' prompts."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        for category in (run["category"], "all"):
            groups[(run["setting"], category, run["mode"])].append(run)
    rows = []
    for (setting, category, mode), group in groups.items():
        steps = sum(r["decode_steps"] for r in group)
        tested = sum(r["tested"] for r in group)
        seconds = sum(r["decode_s"] for r in group)
        tokens = sum(r["decode_tokens"] for r in group)
        split = {
            part: sum(r.get("time_split", {}).get(part, 0.0) for r in group) for part in TIME_PARTS
        }
        rows.append(
            {
                "setting": setting,
                "category": category,
                "mode": mode,
                "replies": len(group),
                "tau": tokens / steps if steps else float("nan"),
                "acceptance": sum(r["accepted"] for r in group) / tested if tested else None,
                "decode_tps": tokens / seconds if seconds else float("nan"),
                "time_split": split,
            }
        )
    plain = {(r["setting"], r["category"]): r["decode_tps"] for r in rows if r["mode"] == "ar"}
    for row in rows:
        base = plain.get((row["setting"], row["category"]))
        row["vs_ar"] = row["decode_tps"] / base if base else None
    return rows


def _available(modes: list[Mode], session: Session) -> list[Mode]:
    kept = []
    for mode in modes:
        if mode == Mode.DFLASH2 and session.drafter is None:
            print("# dflash2 left out: no drafter (--drafter, or the model's companion)")
        elif mode == Mode.MTP and session.mtp is None:
            print(f"# mtp left out: {session.mtp_unavailable}")
        else:
            kept.append(mode)
    return kept


def _table(rows: list[dict[str, Any]], modes: list[Mode]) -> str:
    lines = ["setting  category  " + "  ".join(f"{m.value:>24}" for m in modes)]
    by_key = {(r["setting"], r["category"], r["mode"]): r for r in rows}
    keys = sorted(
        {(r["setting"], r["category"]) for r in rows}, key=lambda k: (k[0], k[1] == "all")
    )
    for setting, category in keys:
        cells = []
        for mode in modes:
            r = by_key.get((setting, category, mode.value))
            cells.append(
                "-"
                if r is None
                else f"tau {r['tau']:.2f} {r['decode_tps']:5.1f}/s {r['vs_ar'] or 0:.2f}x"
            )
        lines.append(f"{setting:8} {category:9} " + "  ".join(f"{c:>24}" for c in cells))
    return "\n".join(lines)


def auto_against_best(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per prompt and setting: auto's tok/s over the best fixed mode's (and over plain
    decoding's) on that same prompt, the bar a user who leaves auto on holds it to."""
    by_prompt: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for run in runs:
        tps = run["decode_tokens"] / run["decode_s"] if run["decode_s"] else 0.0
        by_prompt[(run["setting"], run["prompt"])][run["mode"]].append(tps)
    rows = []
    for (setting, prompt), modes in by_prompt.items():
        mean = {m: sum(v) / len(v) for m, v in modes.items()}
        fixed = {m: t for m, t in mean.items() if m != Mode.AUTO.value}
        if Mode.AUTO.value not in mean or not fixed:
            continue
        best = max(fixed, key=fixed.__getitem__)
        auto = mean[Mode.AUTO.value]
        plain = mean.get(Mode.AR.value)
        rows.append(
            {
                "setting": setting,
                "prompt": prompt,
                "best_mode": best,
                "auto_vs_best": auto / fixed[best] if fixed[best] else None,
                "auto_vs_ar": auto / plain if plain else None,
            }
        )
    return rows


def best_table(rows: list[dict[str, Any]]) -> str:
    lines = ["auto against the best fixed mode of each prompt"]
    for row in rows:
        vs_ar = row["auto_vs_ar"]
        lines.append(
            f"{row['setting']:8} {row['prompt']:28} best {row['best_mode']:8} "
            f"auto/best {row['auto_vs_best']:.2f}x"
            + (f"  auto/plain {vs_ar:.2f}x" if vs_ar is not None else "")
        )
    return "\n".join(lines)


def split_table(rows: list[dict[str, Any]]) -> str:
    """Where each mode's decode time went over all prompts (``stats.TIME_PARTS``), as shares
    of it, and the seconds auto spent beyond its plain steps' share."""
    lines = ["time split (share of decode time)  " + " ".join(f"{p:>7}" for p in TIME_PARTS)]
    for row in rows:
        if row["category"] != "all":
            continue
        total = sum(row["time_split"].values()) or 1.0
        shares = " ".join(f"{100 * row['time_split'][p] / total:6.1f}%" for p in TIME_PARTS)
        lines.append(f"{row['setting']:8} {row['mode']:24} {shares}")
    return "\n".join(lines)


def selected_prompts(path: Path | None, categories: str | None) -> list[HeldOutPrompt]:
    prompts = load_heldout(path or HELDOUT_FILE)
    if categories:
        wanted = {c.strip() for c in categories.split(",") if c.strip()}
        prompts = [p for p in prompts if p.category in wanted]
        if not prompts:
            raise EngineError(f"no prompt of the categories {sorted(wanted)}")
    return prompts


def run_acceptance(args: argparse.Namespace) -> int:
    prompts = selected_prompts(args.prompts, args.categories)
    settings = sampling_settings(args.temp, args.seeds)
    path = resolve_model(args.model)
    target = TargetModel.load(path)
    speculators = speculators_from_args(args, target)
    session = Session(target, speculators.drafter, speculators.mtp, speculators.mtp_reason)
    modes = _available(parse_modes(args.modes or DEFAULT_MODES), session)
    formatter = ChatFormatter(target.tokenizer)
    base = config_from_args(args)
    print(f"# {machine_description()}; {backend_info(target.dtype).describe()}; model {path.name}")
    session_warm = formatter.encode_messages([{"role": "user", "content": "Hello"}])
    measure_reply(session, session_warm, replace(base, max_tokens=4))
    runs: list[dict[str, Any]] = []
    for prompt in prompts:
        ids = formatter.encode_messages(prompt.messages)
        for setting, sampling in settings:
            for mode in modes:
                config = replace(base, mode=mode, sampling=sampling)
                run = measure_reply(session, ids, config)
                run |= {"prompt": prompt.id, "category": prompt.category, "setting": setting}
                run |= {"mode": mode.value, "seed": sampling.seed}
                tau = run["decode_tokens"] / max(run["decode_steps"], 1)
                print(
                    f"{prompt.id:24} {setting:7} {mode.value:8} tau {tau:.2f} "
                    f"{run['decode_tokens'] / max(run['decode_s'], 1e-9):6.1f} tok/s",
                    flush=True,
                )
                runs.append(run)
    rows = summarise(runs)
    print(_table(rows, modes))
    print(split_table(rows))
    against_best = auto_against_best(runs)
    if against_best:
        print(best_table(against_best))
    if args.json_out:
        report = {
            "machine": machine_description(),
            "backend": backend_info(target.dtype).describe(),
            "model": path.name,
            "prompts": shown_path(args.prompts or HELDOUT_FILE),
            "max_tokens": base.max_tokens,
            "width": base.width,
            "summary": rows,
            "auto_against_best": against_best,
            "runs": runs,
        }
        args.json_out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0
