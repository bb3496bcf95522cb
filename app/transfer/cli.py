"""``python -m app export`` and ``python -m app import``: the history in and out without a
window (the data folder is the app's; FLASHCHAT_HOME moves it). A bad file or id exits with
code 2 and one line saying why; nothing is half-imported."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from app.history_file import default_database_path
from app.storage import ConversationStore, StorageError
from app.transfer.errors import TransferError
from app.transfer.export import FORMATS, export_conversations
from app.transfer.importing import read_import

COMMANDS = ("export", "import")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m app")
    sub = parser.add_subparsers(dest="command", required=True)
    out = sub.add_parser("export", help="write conversations to a FlashChat JSON or Markdown file")
    out.add_argument("--out", type=Path, required=True, help="the file to write")
    out.add_argument(
        "--format", choices=FORMATS, default=None, help="json or md (default: from --out's suffix)"
    )
    out.add_argument(
        "--id",
        type=int,
        action="append",
        dest="ids",
        help="a conversation id (repeatable; default: all)",
    )
    inp = sub.add_parser(
        "import", help="add the conversations of a FlashChat JSON, OpenAI messages or ChatGPT file"
    )
    inp.add_argument("file", type=Path)
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        with ConversationStore(default_database_path()) as store:
            if args.command == "export":
                fmt = args.format or ("md" if args.out.suffix.lower() == ".md" else "json")
                n = export_conversations(store, args.out, fmt, args.ids)
                print(f"Exported {n} conversation{'s' * (n != 1)} to {args.out}.")
            else:
                imported = read_import(args.file, time.time())
                store.add_conversations(imported.conversations)
                print(imported.summary(args.file.name))
    except (TransferError, StorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
