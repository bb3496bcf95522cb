"""Which layers each rank holds: contiguous runs, sized so that every rank's share of the
weights follows its usable memory, as exo splits a model. Rank 0 holds the first layers
and also the embeddings, the final norm and the head (and a built-in MTP head), so it
takes fewer layers by their bytes: on the Qwen demo the tied embeddings weigh as much as
nine of its 24 layers.

The bytes are read from the checkpoint's safetensors headers, not by loading anything.
``FLASHCHAT_PIPELINE_SPLIT`` ("10,14": layers per rank, rank 0 first) overrides.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

from engine_mlx.errors import EngineError

SPLIT_ENV = "FLASHCHAT_PIPELINE_SPLIT"
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def checkpoint_bytes(folder: Path, layers: int) -> tuple[list[int], int]:
    """Bytes of each of the ``layers`` layers, and of everything else, in ``folder``'s
    safetensors files."""
    per_layer, rest = [0] * layers, 0
    for file in sorted(folder.glob("*.safetensors")):
        with file.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            start, end = entry["data_offsets"]
            found = _LAYER.search(name)
            if found is not None and int(found[1]) < layers:
                per_layer[int(found[1])] += end - start
            else:
                rest += end - start
    return per_layer, rest


def split_layers(
    per_layer: list[int], rest: int, memory: list[int], fixed: str | None = None
) -> list[int]:
    """Layers per rank: ``fixed`` if given, else contiguous runs whose bytes (rank 0's with
    ``rest``) follow ``memory``, at least one layer each."""
    layers, ranks = len(per_layer), len(memory)
    if layers < ranks:
        raise EngineError(f"{layers} layers cannot be split across {ranks} ranks")
    if fixed:
        return _fixed(fixed, layers, ranks)
    weights = [max(m, 1) for m in memory]
    total = rest + sum(per_layer)
    counts, held, at = [], rest, 0  # held: the bytes given out so far
    for rank in range(ranks - 1):
        goal = total * sum(weights[: rank + 1]) / sum(weights)
        start = at
        room = layers - (ranks - rank - 1)  # leave one layer for each rank after this one
        while at < room and (at == start or held + per_layer[at] / 2 <= goal):
            held += per_layer[at]
            at += 1
        counts.append(at - start)
    counts.append(layers - at)
    return counts


def _fixed(text: str, layers: int, ranks: int) -> list[int]:
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        counts = []
    if len(counts) != ranks or min(counts) < 1 or sum(counts) != layers:
        raise EngineError(
            f"{SPLIT_ENV}={text!r}: give {ranks} positive layer counts that add up to the "
            f"model's {layers} layers"
        )
    return counts
