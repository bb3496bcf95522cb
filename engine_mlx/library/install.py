"""One entry point for every source: ``add(source)`` downloads, copies or imports it.

The CLI, the app's drop handler and its paste shortcut all go through here, so a hub link,
a folder, a GGUF and MTP files get the same checks and the same atomic install.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from engine_mlx.library.download import DownloadOptions, pull
from engine_mlx.library.hub import RepoPlan
from engine_mlx.library.local import import_gguf_file, install_folder, install_mtp_files
from engine_mlx.library.progress import ProgressCallback
from engine_mlx.library.sources import (
    GGUFSource,
    HubSource,
    LocalFolder,
    SafetensorsFiles,
    Source,
)


def add(
    source: Source,
    root: Path | None = None,
    *,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    options: DownloadOptions | None = None,
    memory_limit: int | None = None,
    on_plan: Callable[[RepoPlan], None] | None = None,
) -> Path:
    """Install ``source`` into the library (``root``, default ``models_dir()``); return the
    installed folder. Raises an EngineError that says what went wrong and what to do."""
    if isinstance(source, HubSource):
        return pull(
            source,
            root,
            progress=progress,
            cancel=cancel,
            options=options,
            memory_limit=memory_limit,
            on_plan=on_plan,
        )
    if isinstance(source, LocalFolder):
        return install_folder(source.path, root, progress=progress, cancel=cancel)
    if isinstance(source, GGUFSource):
        return import_gguf_file(source.path, root, progress=progress, cancel=cancel)
    if isinstance(source, SafetensorsFiles):
        return install_mtp_files(list(source.paths), root, progress=progress, cancel=cancel)
    raise TypeError(f"not a library source: {source!r}")
