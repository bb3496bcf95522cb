"""Screenshots for the README, from a real window on a virtual screen.

    xvfb-run -s "-screen 0 1280x800x24" .venv/bin/python scripts/take_screenshots.py OUT_DIR

``--width 1024`` (on a screen at least as wide) shows the window at a smaller laptop's width.

``--thinking`` (with ``--model`` a thinking model) sets a thinking budget of 40 tokens and
grabs the finished reply with its reasoning folded and then opened (thinking_collapsed.png,
thinking_expanded.png).

``--long`` asks for a long Markdown tutorial (headings, lists, code blocks, a table; up to 900
tokens) and grabs it mid-stream and finished (long_streaming.png, long_finished.png).

``--transfer`` also exports the finished conversation (File → Export), deletes it, imports the
file back and grabs the window before and after (transfer_before.png, transfer_after.png).

Opens FlashChat on the demo model (and a drafter, if ``--drafter`` is given), grabs the screen
empty, then mid-reply with the speed panel live.

``--library`` instead shows the model library with a download in progress (library.png): a
local hub server (the tests' one) serves the demo model under its Hugging Face name at a
limited speed, a huggingface.co link to it is dropped onto the window, and the screen is
grabbed once the download is well under way. The library also holds a drafter that fits the
demo model and one that does not, so the pairing column shows both.

``--drop FILE`` instead drops FILE (a model folder, a ``.gguf``: a drafter GGUF, say) onto the
window once its model is loaded, and grabs the library when the import ends (drop.png). The
library is the user's, or ``FLASHCHAT_HOME``'s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PySide6.QtCore import QObject, QTimer, Slot

import engine_mlx  # noqa: F401  (the BLAS before mlx)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from window_overhead import LONG

from engine_mlx.demo import DEMO


class Driver(QObject):
    """Lives on the GUI thread, so the worker's signals reach it queued (a plain function
    would run on the worker thread)."""

    def __init__(self, app, win, args) -> None:
        super().__init__()
        self.app, self.win, self.args = app, win, args
        self.segments = 0
        self.switched_at = 0
        self.streaming_grabbed = False

    def grab(self, name: str) -> None:
        self.app.primaryScreen().grabWindow(0).save(str(self.args.out / name))
        print("saved", self.args.out / name)

    @Slot(object)
    def on_loaded(self, _info: object) -> None:
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
        if self.args.thinking:
            from dataclasses import replace

            self.win.settings = replace(
                self.win.settings, thinking_budget=40, max_tokens=120, temperature=0.0
            )
        if self.args.long:
            from dataclasses import replace

            prompt = LONG
            self.win.settings = replace(self.win.settings, max_tokens=900, temperature=0.0)
        self.win.prompt_edit.setPlainText(prompt)
        self.win.send()

    @Slot(object)
    def on_segments(self, *_: object) -> None:
        self.segments += 1
        if self.args.switch_at:
            if self.switched_at and self.segments == self.switched_at + 30:
                self.grab("switch.png")
                self.win.stop()
        elif not self.streaming_grabbed and len(self.win.chat.streaming_text()) >= (
            2500 if self.args.long else 400
        ):
            self.streaming_grabbed = True
            self.grab("long_streaming.png" if self.args.long else "streaming.png")

    @Slot(object)
    def on_switch(self, *_: object) -> None:
        self.switched_at = self.segments

    @Slot(object)
    def on_finished(self, *_: object) -> None:
        if self.args.switch_at:
            QTimer.singleShot(300, self.app.quit)
            return
        QTimer.singleShot(300, self.finish)

    @Slot()
    def finish(self) -> None:
        self.grab("long_finished.png" if self.args.long else "finished.png")
        if self.args.thinking:
            self.grab("thinking_collapsed.png")
            message = self.win.store.messages(self.win.conversation_id)[-1]
            self.win.chat.toggle_reasoning(str(message.id))
            QTimer.singleShot(300, self.finish_thinking)
            return
        if self.args.transfer:
            self.grab("transfer_before.png")
            exported = self.args.out / "conversation.json"
            conv = self.win.conversation_id
            self.win.transfer.export_to(exported, "json", [conv])
            self.win.conversations.delete(conv, "", confirm=False)
            self.win.transfer.import_from(exported)
            QTimer.singleShot(500, self.finish_transfer)
            return
        self.win.close()
        self.app.quit()

    @Slot()
    def finish_thinking(self) -> None:
        self.grab("thinking_expanded.png")
        self.win.close()
        self.app.quit()

    @Slot()
    def finish_transfer(self) -> None:
        self.grab("transfer_after.png")
        self.win.close()
        self.app.quit()

    @Slot(str, dict)
    def on_library_progress(self, _job: str, progress: dict) -> None:
        fraction = progress["done"] / max(progress["total"], 1)
        moving = progress["phase"] == "downloading" and progress["speed_bps"] > 0
        if moving and fraction >= 0.4 and not self.segments:  # grab once
            self.segments = 1
            QTimer.singleShot(300, self.finish_library)

    @Slot(object)
    def on_loaded_library(self, _info: object) -> None:
        QTimer.singleShot(500, self.start_library)

    @Slot()
    def start_library(self) -> None:
        from PySide6.QtCore import QMimeData

        mime = QMimeData()
        mime.setText(f"https://huggingface.co/{self.args.library_repo}")
        self.drop_on_window(mime)

    def drop_on_window(self, mime) -> None:
        """Open the library, then drag ``mime`` onto the window's centre and drop it there."""
        from PySide6.QtCore import QPointF, Qt
        from PySide6.QtGui import QDragEnterEvent, QDropEvent
        from PySide6.QtWidgets import QApplication

        self.win.open_library()
        self.win.library_view.setGeometry(170, 110, 960, 500)
        pos = self.win.rect().center()
        copy, left = Qt.DropAction.CopyAction, Qt.MouseButton.LeftButton
        none = Qt.KeyboardModifier.NoModifier
        QApplication.sendEvent(self.win, QDragEnterEvent(pos, copy, mime, left, none))
        QApplication.sendEvent(self.win, QDropEvent(QPointF(pos), copy, mime, left, none))

    @Slot(object)
    def on_loaded_drop(self, _info: object) -> None:
        QTimer.singleShot(500, self.start_drop)

    @Slot()
    def start_drop(self) -> None:
        from PySide6.QtCore import QMimeData, QUrl

        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(str(self.args.drop.resolve()))])
        self.drop_on_window(mime)

    @Slot(str, str)
    def on_drop_done(self, _job: str, message: str) -> None:
        print("library:", message)
        QTimer.singleShot(800, self.finish_drop)

    @Slot()
    def finish_drop(self) -> None:
        path = self.args.out / "drop.png"
        self.win.library_view.grab().save(str(path))
        print("saved", path)
        self.win.close()
        self.app.quit()

    @Slot()
    def finish_library(self) -> None:
        path = self.args.out / "library.png"  # the library window alone, not the whole screen
        self.win.library_view.grab().save(str(path))
        print("saved", path)
        self.win.library_worker.cancel_all()
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
    parser.add_argument("--prompt-file", default="docs/auto-mode.md", help="text for --switch-at")
    parser.add_argument(
        "--switch-at",
        type=int,
        default=0,
        help="auto mode with a context threshold: capture the mode switch (switch.png) instead",
    )
    parser.add_argument(
        "--prompt", default="Explain what speculative decoding is, with a short Python example."
    )
    parser.add_argument("--width", type=int, default=1280, help="window width in pixels")
    parser.add_argument("--transfer", action="store_true", help="export, delete, import back")
    parser.add_argument("--long", action="store_true", help="a long reply, mid-stream/finished")
    parser.add_argument("--thinking", action="store_true", help="a thinking reply, folded/open")
    parser.add_argument("--library", action="store_true", help="library.png: a download")
    parser.add_argument("--library-repo", default=DEMO.hub_repo)
    parser.add_argument("--library-speed", type=float, default=6e6, help="bytes/s served")
    parser.add_argument("--drop", type=Path, default=None, help="drop.png: this file dropped")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    hub = prepare_library(args) if args.library else None

    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow

    app = QApplication(sys.argv[:1])
    db = Path(tempfile.mkdtemp()) / "screens.sqlite3"
    win = MainWindow(args.model, args.drafter, db_path=db)
    win.setGeometry(0, 0, args.width, 800)
    win.show()
    driver = Driver(app, win, args)
    win.worker.model_loaded.connect(driver.on_loaded)
    win.worker.segments.connect(driver.on_segments)
    win.worker.finished.connect(driver.on_finished)
    win.worker.error.connect(driver.on_error)
    win.worker.mode_switched.connect(driver.on_switch)
    if args.library:
        win.worker.model_loaded.disconnect(driver.on_loaded)
        win.worker.model_loaded.connect(driver.on_loaded_library)
        win.library_worker.progress.connect(driver.on_library_progress)
    elif args.drop:
        win.worker.model_loaded.disconnect(driver.on_loaded)
        win.worker.model_loaded.connect(driver.on_loaded_drop)
        win.library_worker.installed.connect(driver.on_drop_done)
        win.library_worker.failed.connect(driver.on_drop_done)
    code = app.exec()
    if hub is not None:
        hub.stop()
    return code


def prepare_library(args: argparse.Namespace):
    """A temporary library (the demo model, a drafter that fits it, one that does not) and a
    local hub serving the demo model as ``--library-repo``, throttled."""
    import os

    home = Path(tempfile.mkdtemp(prefix="flashchat-screens-"))
    os.environ["HOME"] = str(home)  # the library shows as ~/.local/share/flashchat/models
    for name in ("FLASHCHAT_HOME", "XDG_DATA_HOME"):
        os.environ.pop(name, None)
    from engine_mlx.api import init_drafter
    from engine_mlx.demo import ensure_demo_model
    from engine_mlx.paths import models_dir
    from tests.support.hub_server import HubRepo, HubServer
    from tests.support.tiny_models import build_tiny_model

    demo = ensure_demo_model()
    init_drafter(demo, models_dir() / f"{demo.name}-untrained-DFlash2", layers=2, block=8)
    tiny = build_tiny_model("qwen3", home / "tiny-qwen3")
    init_drafter(tiny, models_dir() / "Qwen3-tiny-DFlash2", layers=2, block=8)
    readme = f"---\nlicense: apache-2.0\n---\n# {demo.name}\n".encode()
    hub = HubServer().start()
    files = {p.name: p.read_bytes() for p in demo.iterdir() if p.name != "flashchat_import.json"}
    hub.add(HubRepo(args.library_repo, {**files, "README.md": readme}))
    hub.throttle_bps = args.library_speed
    os.environ["HF_ENDPOINT"] = hub.endpoint
    args.model = str(demo)
    return hub


if __name__ == "__main__":
    raise SystemExit(main())
