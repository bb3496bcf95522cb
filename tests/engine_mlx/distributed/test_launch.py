"""What rank 0 says when another rank has gone."""

from __future__ import annotations

import subprocess
import sys

from engine_mlx.distributed.launch import Pipeline, _alive


def test_rank_0_names_a_rank_on_this_machine_whose_process_has_exited():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    pipeline = Pipeline(link=None, memory=[1, 1, 1], pids=[0, 1, child.pid], hosts=[7, 7, 8])
    assert _alive(1) and not _alive(child.pid)
    assert pipeline.gone() is None  # rank 2 is on another machine: not told from here
    pipeline.hosts[2] = 7
    assert pipeline.gone() == f"rank 2 (process {child.pid}) has exited"
