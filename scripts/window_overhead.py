"""How much the window's rendering slows generation: the same prompt decoded with the window
streaming it and without (the engine alone, as the CLI runs it), alternating, in one process,
for a short reply and a long one (~2,000 tokens with code blocks and a table, so the cost's
growth with the reply's length shows).

    xvfb-run -s "-screen 0 1280x800x24" .venv/bin/python scripts/window_overhead.py [--runs 3]

Next to tok/s it reports the GUI thread's time: its CPU time per token over the whole reply
(``time.thread_time``: handlers, layout, painting, everything), and the pacer's accounts
(``app.stream_pacer.GuiCost``): time per redraw, redraws per second, and the mean redraw per
quarter of the reply. Both runs ignore the end-of-sequence token, so each reply is as long
as asked. ``--shares 0.025,0.5`` streams each run once per share of the GUI thread given to
the stream (``app.stream_pacer``) instead of the window's own choice, before the engine's run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PySide6.QtCore import QEventLoop, QObject, Slot

import engine_mlx  # noqa: F401  (the BLAS before mlx)

SHORT = "Write a short story about a lighthouse keeper."
LONG = (
    "Write a long, detailed tutorial on reading, cleaning and summarising CSV files in Python. "
    "Use Markdown: headings, short paragraphs, bullet lists, at least four separate fenced code "
    "blocks (Python, and one shell session), and a Markdown table comparing the csv module, "
    "pandas and polars."
)


class Waiter(QObject):
    """On the GUI thread: the worker's signals reach it queued, like the window's."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = QEventLoop()
        self.stats: dict = {}
        self.gui_cpu_end = 0.0

    @Slot(object)
    def loaded(self, _info: object) -> None:
        self.loop.quit()

    @Slot(object)
    def finished(self, event: object) -> None:
        self.gui_cpu_end = time.thread_time()  # after the window's own handler (connected first)
        self.stats = event.stats.to_json()
        self.loop.quit()


@dataclass
class Runs:
    """One prompt's measurements, a value per run."""

    window_tps: list[float] = field(default_factory=list)
    engine_tps: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    gui_ms_per_token: list[float] = field(default_factory=list)
    ms_per_redraw: list[float] = field(default_factory=list)
    redraws_per_s: list[float] = field(default_factory=list)
    quarters: list[list[float]] = field(default_factory=list)  # mean redraw ms per quarter

    def report(self, name: str) -> str:
        def med(values: list[float]) -> float:
            return statistics.median(values) if values else float("nan")

        w, e = med(self.window_tps), med(self.engine_tps)
        pairs = med([a / b for a, b in zip(self.window_tps, self.engine_tps, strict=True)])
        quarters = [med([q[i] for q in self.quarters if len(q) > i]) for i in range(4)]
        return (
            f"{name}: {round(med(self.tokens))} tokens; window {w:.2f} tok/s, engine alone "
            f"{e:.2f} tok/s, ratio {w / e:.3f}, median of the runs' ratios {pairs:.3f} "
            f"(runs: window "
            f"{[round(x, 2) for x in self.window_tps]}, engine "
            f"{[round(x, 2) for x in self.engine_tps]})\n"
            f"  GUI thread: {med(self.gui_ms_per_token):.3f} ms CPU per token; "
            f"{med(self.ms_per_redraw):.2f} ms per redraw, {med(self.redraws_per_s):.1f} "
            f"redraws/s; per redraw by quarter of the reply: "
            + " / ".join(f"{q:.2f}" for q in quarters)
            + " ms"
        )


def quarter_means(samples: list[tuple[int, float]]) -> list[float]:
    """Mean flush time (ms) over each quarter of the reply, by characters so far."""
    if not samples:
        return []
    total = samples[-1][0] or 1
    buckets: list[list[float]] = [[], [], [], []]
    for chars, seconds in samples:
        buckets[min(3, 4 * chars // (total + 1))].append(seconds * 1000)
    return [statistics.fmean(b) if b else float("nan") for b in buckets]


def stream_once(win, waiter: Waiter, prompt: str, runs: Runs) -> None:
    """One reply streamed in the window; its speed and the GUI thread's time kept in ``runs``."""
    from app.stream_pacer import GuiCost

    win.new_chat()
    win.prompt_edit.setPlainText(prompt)
    win.pacer.cost = GuiCost()
    cpu_start = time.thread_time()
    win.send()
    waiter.loop.exec()
    cost, stats = win.pacer.cost, waiter.stats
    tokens = int(stats.get("generated_tokens") or 0)
    decode_s = tokens / stats["decode_tps"] if stats.get("decode_tps") else 0.0
    runs.window_tps.append(stats["decode_tps"])
    runs.tokens.append(tokens)
    runs.gui_ms_per_token.append(1000 * (waiter.gui_cpu_end - cpu_start) / max(tokens, 1))
    runs.ms_per_redraw.append(1000 * cost.flush_s / max(cost.flushes, 1))
    runs.redraws_per_s.append(cost.flushes / decode_s if decode_s else 0.0)
    runs.quarters.append(quarter_means(cost.samples))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128, help="the short reply")
    parser.add_argument("--long-tokens", type=int, default=2000, help="the long one (0: none)")
    parser.add_argument("--shares", default="", help="stream shares to compare, e.g. 0.025,0.5")
    args = parser.parse_args()

    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from engine_mlx.api import encode_prompt

    _app = QApplication(sys.argv[:1])  # kept alive for the whole run
    win = MainWindow("", db_path=Path(tempfile.mkdtemp()) / "overhead.sqlite3")
    win.resize(1280, 800)
    win.show()
    waiter = Waiter()
    win.worker.model_loaded.connect(waiter.loaded)
    win.worker.finished.connect(waiter.finished)
    waiter.loop.exec()
    session = win.worker._session  # the same loaded model, used while the worker is idle
    plan = [("short", SHORT, args.max_tokens)]
    if args.long_tokens:
        plan.append(("long", LONG, args.long_tokens))
    for name, prompt, max_tokens in plan:
        win.settings = replace(
            win.settings,
            max_tokens=max_tokens,
            temperature=0.0,
            forced_mode="ar",
            system_prompt="",
            loop_guard=False,  # as the engine alone: both replies as long as asked
        )
        win._overrides = {"ignore_eos": True}
        ids = encode_prompt(session.target, [{"role": "user", "content": prompt}])
        # The engine alone decodes with the very settings the window sends (the app's sampling
        # defaults at temperature 0: its repetition penalty too), so the two replies are equal.
        config = win.worker._config(win._generation_settings())
        chosen = win.pacer.share
        shares = [float(x) for x in args.shares.split(",")] if args.shares else [chosen]
        runs = {share: Runs() for share in shares}
        for _ in range(args.runs):
            for share, kept in runs.items():
                win.pacer.share = share
                stream_once(win, waiter, prompt, kept)
            finished = list(session.generate(ids, config))[-1]
            for kept in runs.values():
                kept.engine_tps.append(finished.stats.decode_tps)
        for share, kept in runs.items():
            print(kept.report(f"{name}, stream share {share:g}"), flush=True)
        win.pacer.share = chosen
    win.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
