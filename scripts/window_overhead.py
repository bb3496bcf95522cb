"""How much the window's rendering slows generation: the same prompt decoded with the window
streaming it and without (the engine alone, as the CLI runs it), alternating, in one process.

    xvfb-run -s "-screen 0 1280x800x24" .venv/bin/python scripts/window_overhead.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PySide6.QtCore import QEventLoop, QObject, Slot

import engine_mlx  # noqa: F401  (the BLAS before mlx)

PROMPT = "Write a short story about a lighthouse keeper."


class Waiter(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.loop = QEventLoop()
        self.stats: dict = {}

    @Slot(object)
    def loaded(self, _info: object) -> None:
        self.loop.quit()

    @Slot(object)
    def finished(self, event: object) -> None:
        self.stats = event.stats.to_json()
        self.loop.quit()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    from dataclasses import replace

    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from engine_mlx.api import encode_prompt
    from engine_mlx.config import GenerationConfig

    _app = QApplication(sys.argv[:1])  # kept alive for the whole run
    win = MainWindow("", db_path=Path(tempfile.mkdtemp()) / "overhead.sqlite3")
    win.resize(1280, 800)
    win.show()
    waiter = Waiter()
    win.worker.model_loaded.connect(waiter.loaded)
    win.worker.finished.connect(waiter.finished)
    waiter.loop.exec()
    win.settings = replace(
        win.settings,
        max_tokens=args.max_tokens,
        temperature=0.0,
        forced_mode="ar",
        system_prompt="",
    )
    session = win.worker._session  # the same loaded model, used while the worker is idle
    ids = encode_prompt(session.target, [{"role": "user", "content": PROMPT}])
    config = GenerationConfig(max_tokens=args.max_tokens, ignore_eos=True)
    window_tps, engine_tps = [], []
    for _ in range(args.runs):
        win.new_chat()
        win.prompt_edit.setPlainText(PROMPT)
        win.send()
        waiter.loop.exec()
        window_tps.append(waiter.stats["decode_tps"])
        finished = list(session.generate(ids, config))[-1]
        engine_tps.append(finished.stats.decode_tps)
    w, e = statistics.median(window_tps), statistics.median(engine_tps)
    print(
        f"window {w:.2f} tok/s, engine alone {e:.2f} tok/s, ratio {w / e:.3f} "
        f"(runs: window {[round(x, 2) for x in window_tps]}, "
        f"engine {[round(x, 2) for x in engine_tps]})"
    )
    win.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
