"""Screenshots for the README, from a real window on a virtual screen.

    xvfb-run -s "-screen 0 1280x800x24" .venv/bin/python scripts/take_screenshots.py OUT_DIR

Opens FlashChat on the demo model (and a drafter, if ``--drafter`` is given), grabs the screen
empty, then mid-reply with the speed panel live.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PySide6.QtCore import QObject, QTimer, Slot

import engine_mlx  # noqa: F401  (OpenBLAS before mlx)


class Driver(QObject):
    """Lives on the GUI thread, so the worker's signals reach it queued (a plain function
    would run on the worker thread)."""

    def __init__(self, app, win, args) -> None:
        super().__init__()
        self.app, self.win, self.args = app, win, args
        self.segments = 0
        self.switched_at = 0

    def grab(self, name: str) -> None:
        self.app.primaryScreen().grabWindow(0).save(str(self.args.out / name))
        print("saved", self.args.out / name)

    @Slot(dict)
    def on_loaded(self, _info: dict) -> None:
        QTimer.singleShot(500, self.start)

    @Slot()
    def start(self) -> None:
        prompt = self.args.prompt
        if self.args.switch_at:
            from dataclasses import replace

            text = Path(self.args.prompt_file).read_text(encoding="utf-8")
            prompt = f"Summarise this document in a few sentences:\n\n{text}"
            self.win.settings = replace(
                self.win.settings,
                forced_mode="auto",
                auto_threshold=self.args.switch_at,
                max_tokens=400,
                temperature=0.0,
            )
            self.win.panel.set_auto(True)
        else:
            self.grab("empty.png")
        self.win.prompt_edit.setPlainText(prompt)
        self.win.send()

    @Slot(list, dict)
    def on_segments(self, *_: object) -> None:
        self.segments += 1
        if self.args.switch_at:
            if self.switched_at and self.segments == self.switched_at + 30:
                self.grab("switch.png")
                self.win.stop()
        elif self.segments == 45:
            self.grab("streaming.png")

    @Slot(str, str, str)
    def on_switch(self, *_: object) -> None:
        self.switched_at = self.segments

    @Slot(str, dict, str)
    def on_finished(self, *_: object) -> None:
        if self.args.switch_at:
            QTimer.singleShot(300, self.app.quit)
            return
        QTimer.singleShot(300, self.finish)

    @Slot()
    def finish(self) -> None:
        self.grab("finished.png")
        self.win.close()
        self.app.quit()

    @Slot(str)
    def on_error(self, message: str) -> None:
        print("error:", message)
        self.grab("error.png")
        self.app.quit()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", default="")
    parser.add_argument("--drafter", default="")
    parser.add_argument("--prompt-file", default="README.md", help="text for --switch-at")
    parser.add_argument(
        "--switch-at",
        type=int,
        default=0,
        help="auto mode with a context threshold: capture the mode switch (switch.png) instead",
    )
    parser.add_argument(
        "--prompt", default="Explain what speculative decoding is, with a short Python example."
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow

    app = QApplication(sys.argv[:1])
    db = Path(tempfile.mkdtemp()) / "screens.sqlite3"
    win = MainWindow(args.model, args.drafter, db_path=db)
    win.setGeometry(0, 0, 1280, 800)
    win.show()
    driver = Driver(app, win, args)
    win.worker.model_loaded.connect(driver.on_loaded)
    win.worker.segments.connect(driver.on_segments)
    win.worker.finished.connect(driver.on_finished)
    win.worker.error.connect(driver.on_error)
    win.worker.mode_switched.connect(driver.on_switch)
    return app.exec()


if __name__ == "__main__":
    raise SystemExit(main())
