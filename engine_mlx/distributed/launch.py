"""Joining the pipeline ``mlx.launch`` started: the ranks, how the layers are split among
them, and each rank's part of loading.

The layers are split by each rank's usable memory (a Mac's Metal working set, elsewhere the
RAM; ``split``). Rank 0 takes the first layers because it also holds the embeddings, the
head, the drafters and the server.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

from engine_mlx.distributed import doorbell
from engine_mlx.distributed.remote_caches import PipelineClient
from engine_mlx.distributed.split import SPLIT_ENV, checkpoint_bytes, split_layers
from engine_mlx.distributed.stage import serve_stage
from engine_mlx.distributed.wire import Link
from engine_mlx.errors import EngineError
from engine_mlx.library.memory import usable_memory
from engine_mlx.models.loading import validate_model_folder
from engine_mlx.models.target import LayerPart, TargetModel

TIMEOUT_ENV = "FLASHCHAT_PIPELINE_TIMEOUT"  # seconds a forward may take around the ranks
PIPELINED = ("generate", "serve")  # the commands that run across ranks


@dataclass
class Pipeline:
    """This process's place in the pipeline, and what every rank said when it joined."""

    link: Link
    memory: list[int]  # usable bytes per rank
    pids: list[int]
    hosts: list[int]  # a checksum of each rank's host name: same machine or not
    client: PipelineClient | None = None  # rank 0's, once its part is loaded

    @property
    def rank(self) -> int:
        return self.link.rank

    def parts(self, folder: Path, layers: int) -> list[LayerPart]:
        per_layer, rest = checkpoint_bytes(folder, layers)
        counts = split_layers(per_layer, rest, self.memory, os.environ.get(SPLIT_ENV))
        starts = np.cumsum([0, *counts])
        return [LayerPart(int(a), int(b)) for a, b in itertools.pairwise(starts)]

    def gone(self) -> str | None:
        """Which rank has stopped, where this machine can tell (a rank on this machine whose
        process has exited); None when none has."""
        for rank in range(1, len(self.pids)):
            if self.hosts[rank] == self.hosts[0] and not _alive(self.pids[rank]):
                return f"rank {rank} (process {self.pids[rank]}) has exited"
        return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs here (an exited one its parent has not reaped yet, a
    zombie, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)  # no /proc (macOS)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in ("Z", "X")


_joined: list[Pipeline] = []


def join() -> Pipeline | None:
    """The pipeline, when ``mlx.launch`` started this process as one of several ranks."""
    if _joined:
        return _joined[0]
    if "MLX_RANK" not in os.environ:
        return None
    group = mx.distributed.init()
    if group.size() < 2:
        return None
    mine = [usable_memory() or 0, os.getpid(), zlib.crc32(socket.gethostname().encode())]
    every = mx.distributed.all_gather(mx.array([mine], mx.int64), group=group)
    table = np.asarray(every).reshape(group.size(), 3)
    link = Link(group, doorbell.connect(group))
    pipeline = Pipeline(link, *([int(v) for v in table[:, i]] for i in range(3)))
    _joined.append(pipeline)
    return pipeline


def load_part(path: str | Path, pipeline: Pipeline) -> TargetModel:
    """This rank's layers of the model at ``path``; on rank 0 with the client that runs the
    others'."""
    spec = validate_model_folder(Path(path))
    parts = pipeline.parts(spec.path, spec.num_layers)
    part = parts[pipeline.rank]
    target = TargetModel.load(path, part=part)
    target.layout = "pipeline: " + " | ".join(f"{p.start}-{p.stop - 1}" for p in parts)
    if pipeline.rank == 0:
        timeout = float(os.environ.get(TIMEOUT_ENV, "60"))
        target.pipeline = pipeline.client = PipelineClient(pipeline.link, pipeline.gone, timeout)
    else:
        print(
            f"rank {pipeline.rank} (process {os.getpid()}): layers {part.start}-{part.stop - 1} "
            f"of {spec.num_layers}",
            file=sys.stderr,
            flush=True,
        )
    return target


def joined() -> Pipeline | None:
    """The pipeline ``join`` found, if any (without joining)."""
    return _joined[0] if _joined else None


def check_command(command: str) -> None:
    """Only a command that loads one target and decodes runs across ranks."""
    if command not in PIPELINED:
        raise EngineError(f"only {' and '.join(PIPELINED)} run across ranks, not {command}")


def run_stage(command: str, model: Path | None, pipeline: Pipeline) -> int:
    """A rank after the first: load its layers of ``model`` (None: the demo) and serve them."""
    check_command(command)
    if model is None:
        from engine_mlx.demo import ensure_demo_model

        model = ensure_demo_model()
    return serve_stage(load_part(model, pipeline), pipeline.link)


def leave() -> None:
    """Rank 0 is done: the other ranks exit."""
    if _joined and _joined[0].rank == 0 and _joined[0].client is not None:
        _joined[0].client.stop()
