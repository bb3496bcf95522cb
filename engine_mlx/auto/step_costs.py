"""What a decoding step costs on this machine: the target's forward over n tokens at a depth.
(A drafter's proposal is timed by every step that drafts; the auto policy keeps that itself.)

Cost is a property of the machine, the model and the step's shape, not of the text, so it is
measured once per machine and model — a short calibration at the first auto generation
(forwards over 1–16 tokens at depth 0 and, where the context allows, 1024 and 4096, each after
a synthetic context of that depth; a few seconds) —
and cached on disk under a key of both. Every real step then refines it, in two parts:

- the machine's **pace**: how much slower than the table its forwards run right now, from the
  last few steps' ratios whatever their shape (``pace``). A busy machine slows every forward alike,
  so every cell follows it at once, not only the one that is being measured: with cells alone,
  plain decoding's cost rose from 112 to 182 ms while auto decoded plainly on a busy machine
  (Qwen, code at 1k), the drafting modes' cells stayed at their calibration, and auto went back
  and forth to drafting modes priced as if the machine were idle (0.67x plain);
- each cell's **shape**: the median of its last nine measurements, each divided by the pace of
  its moment, the calibration counting as four: a cell that is wrong by itself (a slow moment
  while calibrating) corrects itself within five of its steps, after the pace (three steps) has
  taken what a busy machine does to all of them; an extrapolation to a new depth is replaced
  by its first measurement; one slow step moves neither. Which part of a disagreement is the
  machine's cannot always be told: two sizes measured in turn, one 30% cheaper than its cell,
  move the pace ~14% (the cells nobody measured with it).
Between measured cells the forward's cost is interpolated linearly in tokens and in depth
(attention grows with depth; the weights' cost does not), beyond them extrapolated along the
last two depths.

The cache file is refused — with a message, then a new calibration — when it is corrupt,
written by another format version, or older than ``MAX_AGE_DAYS``.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
import time
from collections import deque
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from statistics import median

from engine_mlx import cpu as cpu_package
from engine_mlx.auto.forward_timing import synthetic_context, time_forwards
from engine_mlx.blas import status as blas_status
from engine_mlx.cpu.machine import cores, cpu_signature
from engine_mlx.models.target import TargetModel
from engine_mlx.paths import step_costs_dir

FORMAT = 2  # 2: calibrated at 4k as well
MAX_AGE_DAYS = 30
TOKENS = (1, 2, 4, 8, 16)
# Replies go deeper than 1k: extrapolated from 0 and 1k, a two-token forward (MTP's) at 4k
# was priced at 228-245 ms where it took ~157 (Qwen), and plans that declined the draft never
# measured it. Measured at 4k too, deeper cells are interpolated, or extrapolated from 1k-4k.
DEPTHS = (0, 1024, 4096)
RECENT = 9  # measurements a cell keeps; its cost is their median
PACE_WINDOW = 5  # steps the pace is made of
PACE_PRIOR = 2  # steps at the table's own pace a new table starts from: one slow step is noise
CALIBRATED_WEIGHT = 4  # measurements a calibrated (or cached) cell's value counts as
NEW_DEPTH_MIN = 256  # depths closer than this (or NEW_DEPTH_SHARE of the depth) share cells
NEW_DEPTH_SHARE = 0.25


@dataclass
class StepCosts:
    """Seconds per verify forward by (tokens, depth)."""

    verify: dict[tuple[int, int], float]  # (tokens, depth) -> seconds
    note: str = ""  # how this table came to be (calibrated now, from the cache, ...)
    # Depths where a one-token forward was measured (calibrated, or a plain step ran there):
    # elsewhere its cost is extrapolated, which ran ~60% high at 4k from a 0-1k calibration.
    plain_depths: set[int] = field(default_factory=set)
    # Each cell's recent measurements (``observe_verify``); a cell without an entry holds
    # the calibration's value, one with an empty entry an extrapolation, to be replaced.
    _recent: dict[tuple[int, int], deque[float]] = field(default_factory=dict, repr=False)
    # Recent steps' measured over tabled seconds (``pace``).
    _pace: deque[float] = field(
        default_factory=lambda: deque([1.0] * PACE_PRIOR, maxlen=PACE_WINDOW), repr=False
    )
    # The pace and the interpolated cells, kept until the next measurement changes them:
    # auto prices every mode every step, and recomputing them was ~0.1 ms of a plain step.
    _pace_now: float | None = field(default=None, repr=False)
    _tabled: dict[tuple[float, int], float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.plain_depths |= {d for n, d in self.verify if n == 1}

    @property
    def pace(self) -> float:
        """How many times the table's seconds the machine's forwards take right now: the
        geometric mean of the recent ratios but the highest and the lowest. A median would
        flip with every step while two sizes disagree (one of them to be corrected by its
        cell), and a plain mean is pulled ~35% by one page fault."""
        if self._pace_now is None:
            ratios = sorted(self._pace)
            if len(ratios) > 2:
                ratios = ratios[1:-1]
            self._pace_now = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        return self._pace_now

    def knows_plain_at(self, depth: int) -> bool:
        return any(_near(d, depth) for d in self.plain_depths)

    def verify_s(self, tokens: float, depth: int) -> float:
        """The forward over ``tokens`` tokens at ``depth`` at the machine's present pace (a
        fractional count: the mean cost of steps of the sizes either side)."""
        return self._tabled_s(tokens, depth) * self.pace

    def _tabled_s(self, tokens: float, depth: int) -> float:
        """The table's value, interpolated between cells."""
        key = (tokens, depth)
        if key not in self._tabled:
            if len(self._tabled) > 4096:
                self._tabled.clear()
            self._tabled[key] = self._interpolated_s(tokens, depth)
        return self._tabled[key]

    def _interpolated_s(self, tokens: float, depth: int) -> float:
        depths = sorted({d for _, d in self.verify})
        if len(depths) == 1 or depth <= depths[0]:
            return self._at_depth(tokens, depths[0])
        for d0, d1 in itertools.pairwise(depths):
            if depth <= d1:
                return _lerp(depth, d0, d1, self._at_depth(tokens, d0), self._at_depth(tokens, d1))
        d0, d1 = depths[-2], depths[-1]
        low, high = self._at_depth(tokens, d0), self._at_depth(tokens, d1)
        return high + max(0.0, high - low) * (depth - d1) / (d1 - d0)

    def _at_depth(self, tokens: float, depth: int) -> float:
        sizes = sorted(n for n, d in self.verify if d == depth)
        if tokens <= sizes[0]:
            return self.verify[(sizes[0], depth)]
        for n0, n1 in itertools.pairwise(sizes):
            if tokens <= n1:
                a, b = self.verify[(n0, depth)], self.verify[(n1, depth)]
                return _lerp(tokens, n0, n1, a, b)
        n0, n1 = sizes[-2], sizes[-1]
        a, b = self.verify[(n0, depth)], self.verify[(n1, depth)]
        return b + max(0.0, b - a) * (tokens - n1) / (n1 - n0)

    def observe_verify(self, tokens: int, depth: int, seconds: float) -> None:
        """A real forward: it moves the pace, and the nearest cell becomes the median of its
        recent measurements at the pace of their moment. A depth far from every
        measured one (the calibration stops at 1k; replies go deeper) first gets cells of
        its own, from the extrapolation, so that it does not bend the cells it was
        extrapolated from; their first measurement replaces the extrapolation. (A moving
        average at 0.1 took ~20 steps to bring plain decoding's cost at 4k from the
        extrapolated 176 ms to the measured 115-150, and four slow steps from a busy machine
        raised MTP's by 17%: auto left MTP, which led plain there, for plain.)"""
        if seconds <= 0:
            return
        depths = {d for _, d in self.verify}
        if not any(_near(d, depth) for d in depths):
            column = round(depth / NEW_DEPTH_MIN) * NEW_DEPTH_MIN
            sizes = {n for n, _ in self.verify}
            new = {(n, column): self._tabled_s(n, column) for n in sizes}
            self.verify.update(new)
            self._tabled.clear()
            self._recent.update({cell: deque(maxlen=RECENT) for cell in new})
        tabled = self._tabled_s(tokens, depth)
        cell = min(self.verify, key=lambda c: (abs(c[1] - depth), abs(c[0] - tokens)))
        if tokens == 1:
            self.plain_depths.add(cell[1])
        ratio = seconds / tabled if tabled > 0 else 1.0
        if self._recent.get(cell, True):  # an extrapolation's error says nothing of the pace
            self._pace.append(min(max(ratio, 1e-3), 1e3))
            self._pace_now = None
        recent = self._recent.setdefault(
            cell, deque([self.verify[cell]] * CALIBRATED_WEIGHT, maxlen=RECENT)
        )
        # The nearest cell only: moving its neighbours too compounded every misjudged size
        # into the others (measured: plain's cost at 4k drifted ~50% high while MTP ran).
        recent.append(self.verify[cell] * ratio / self.pace)
        self.verify[cell] = median(recent)
        self._tabled.clear()

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "written": time.time(),
            "verify": [[n, d, s] for (n, d), s in sorted(self.verify.items())],
        }


class StaleCosts(ValueError):
    """The cached table cannot be used; the message says why."""


def from_json(data: dict, now: float | None = None) -> StepCosts:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StaleCosts("written by another version of FlashChat")
    age_days = ((now or time.time()) - float(data.get("written", 0))) / 86400
    if not 0 <= age_days <= MAX_AGE_DAYS:
        raise StaleCosts(f"{age_days:.0f} days old (at most {MAX_AGE_DAYS})")
    try:
        verify = {(int(n), int(d)): float(s) for n, d, s in data["verify"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise StaleCosts(f"damaged ({exc})") from exc
    if not verify or any(s <= 0 or s != s for s in verify.values()):
        raise StaleCosts("damaged (no or non-positive timings)")
    if len({d for _, d in verify}) > 1 and any(
        (n, d) not in verify for n in {n for n, _ in verify} for d in {d for _, d in verify}
    ):
        raise StaleCosts("damaged (an incomplete table)")
    return StepCosts(verify)


@functools.cache
def kernels_digest() -> str:
    """A digest of the engine's CPU kernels' sources (``engine_mlx/cpu``): a new build of
    them (a faster product) times differently, so it gets a new table."""
    digest = hashlib.sha256()
    for source in sorted(Path(cpu_package.__file__).parent.glob("*.[ch]")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16]


def cache_file(target: TargetModel) -> Path:
    """One file per machine and model: CPU, cores, BLAS, MLX, the engine's kernels, the
    model's files and dtype, and how it is split across processes."""
    spec = target.spec
    config = Path(spec.path) / "config.json"
    try:
        stamp = f"{config.stat().st_size}:{int(config.stat().st_mtime)}"
    except OSError:
        stamp = "?"
    try:
        mlx = metadata.version("mlx")
    except metadata.PackageNotFoundError:
        mlx = "?"
    key = "\n".join(
        (
            cpu_signature(),
            str(cores()),
            blas_status().describe(),
            mlx,
            kernels_digest(),
            str(Path(spec.path).resolve()),
            stamp,
            str(target.dtype),
            *([target.layout] if target.layout else []),  # a split target's: its own file
        )
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    return step_costs_dir() / f"{spec.name}-{digest}.json"


def load_or_calibrate(target: TargetModel, log=None) -> StepCosts:
    """The cached table for this machine and model, or a new calibration (then cached).
    ``log`` receives one line when the cache is refused or a calibration runs."""
    path = cache_file(target)
    say = log or (lambda line: None)
    if target.pipeline is not None:  # its links' latency is this launch's, not the machine's
        start = time.perf_counter()
        costs = calibrate(target)
        costs.note = f"calibrated through the pipeline now in {time.perf_counter() - start:.1f} s"
        say(f"Measured the step costs of {target.spec.name} across its ranks ({costs.note}).")
        return costs
    if path.exists():
        try:
            costs = from_json(json.loads(path.read_text(encoding="utf-8")))
            costs.note = "from this machine's calibration"
            return costs
        except (OSError, ValueError) as exc:
            say(f"Step-cost calibration for {target.spec.name} not used ({exc}); measuring again.")
    start = time.perf_counter()
    costs = calibrate(target)
    costs.note = f"calibrated now in {time.perf_counter() - start:.1f} s"
    say(f"Measured the step costs of {target.spec.name} on this machine ({costs.note}).")
    save(path, costs)
    return costs


def calibrate(target: TargetModel, repeats: int = 3) -> StepCosts:
    """Forwards over ``TOKENS`` tokens at ``DEPTHS`` (those that fit the context), each
    after a synthetic context of that depth (``synthetic_context``: no prefill), made
    consistent (``consistent``)."""
    verify: dict[tuple[int, int], float] = {}
    for depth in DEPTHS:
        if depth + max(TOKENS) >= target.spec.max_context:
            continue
        ms = time_forwards(target, synthetic_context(target, depth), list(TOKENS), repeats)
        verify.update({(n, depth): v / 1000 for n, v in ms.items()})
    return StepCosts(consistent(verify))


def consistent(verify: dict[tuple[int, int], float]) -> dict[tuple[int, int], float]:
    """A forward never costs more at a shallower depth, nor over fewer tokens, so each cell
    comes down to the cheapest of those at least as deep and as large: a slow measurement
    is noise (the first ones after loading a model, a busy machine), and a cell left too
    high is never corrected, because the plans then avoid that size. Cells are lowered,
    never raised: noise only ever makes a forward slower. (Measured: Qwen, 8 tokens at
    depth 0 calibrated at 346 ms, 206 at depth 1,024 and ~165 in use, so plans verified 3
    nodes where 7 paid: auto 1.74x plain, fixed DFlash2 2.59x.)"""
    return {
        (n, d): min(s for (m, e), s in verify.items() if m >= n and e >= d) for (n, d) in verify
    }


def save(path: Path, costs: StepCosts) -> None:
    """Write ``costs`` (atomically), and drop tables too old to be used again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for old in path.parent.glob("*.json"):
            if time.time() - old.stat().st_mtime > MAX_AGE_DAYS * 86400:
                old.unlink(missing_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(costs.to_json()), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache: calibrate again next time


def _near(a: int, b: int) -> bool:
    return abs(a - b) <= max(NEW_DEPTH_MIN, NEW_DEPTH_SHARE * max(a, b))


def _lerp(x: float, x0: float, x1: float, y0: float, y1: float) -> float:
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 != x0 else y0
