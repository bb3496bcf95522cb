"""``python -m app [--model DIR]``: open FlashChat (the demo model by default).
``python -m app export|import …``: the history in and out, without a window."""

from __future__ import annotations

import argparse
import os
import sys

import engine_mlx  # noqa: F401  (the BLAS before mlx)
from engine_mlx.version import version


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("export", "import"):
        from app.transfer.cli import main as transfer

        return transfer(argv)
    parser = argparse.ArgumentParser(prog="flashchat")
    parser.add_argument("--model", default="", help="model folder (default: the demo model)")
    parser.add_argument("--drafter", default="", help="DFlash drafter folder")
    parser.add_argument("--version", action="version", version=f"FlashChat {version()}")
    parser.add_argument(
        "--ask",
        default="",
        help="send this message once the model is loaded, print the greedy reply (at most 64 "
        "tokens) and quit: a smoke test of an installation",
    )
    args = parser.parse_args(argv)
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY")
        or os.environ.get("WAYLAND_DISPLAY")
        or os.environ.get("QT_QPA_PLATFORM")
    ):
        print(
            "No display found: run FlashChat in a desktop session, or under `xvfb-run`.",
            file=sys.stderr,
        )
        return 2
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow

    qt_app = QApplication(sys.argv[:1])
    qt_app.setApplicationName("FlashChat")
    qt_app.setApplicationVersion(version())
    window = MainWindow(args.model, args.drafter)
    if args.ask:
        window.ask_and_quit(args.ask)
    window.show()
    return qt_app.exec()


if __name__ == "__main__":
    raise SystemExit(main())
