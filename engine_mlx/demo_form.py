"""Which form of the demo model the app and the CLI open: the one that decodes fastest here.

The demo is imported at full precision (computed in float32 on the CPU); set-up also writes a
4-bit MLX-quantized copy (``models.quantize``) and times plain decoding of both, once per
machine, and the faster is opened from then on. On the 2-core Xeon the 4-bit copy decoded
about 3x faster (the engine's quantized product, ``cpu/quant_gemm.c``); a machine where it
did not would keep full precision. Either way decoding is lossless: speculative output equals
the chosen form's own plain decoding.

The choice is kept beside the models (``.demo-form.json``) with the machine's signature, so a
copied library on another CPU is measured again.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from engine_mlx.cpu.machine import cpu_signature
from engine_mlx.models.quantize import default_destination, quantize_folder

RECORD = ".demo-form.json"
BITS = 4
STEPS = 12  # timed one-token forwards per form (after a short prefill), median taken


def fastest_form(full: Path, measure: bool = True) -> Path:
    """The folder to open for the demo imported at ``full``: the recorded choice for this
    machine, else (with ``measure``) both forms timed now and the choice recorded; without a
    measurement, full precision."""
    quantized = default_destination(full, BITS)
    record = full.parent / RECORD
    signature = hashlib.sha256(cpu_signature().encode()).hexdigest()[:16]
    try:
        kept = json.loads(record.read_text(encoding="utf-8"))
        if kept.get("machine") == signature and (full.parent / kept["choice"]).is_dir():
            return full.parent / kept["choice"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if not measure:
        return full
    if not (quantized / "config.json").is_file():
        quantize_folder(full, quantized, bits=BITS)
    speeds = {form.name: decode_speed(form) for form in (full, quantized)}
    choice = max(speeds, key=speeds.__getitem__)
    try:
        text = json.dumps({"choice": choice, "tok_s": speeds, "machine": signature}, indent=2)
        record.write_text(text, encoding="utf-8")
    except OSError:
        pass  # measured again next time
    return full.parent / choice


def decode_speed(folder: Path) -> float:
    """Plain decoding tokens/s of the model in ``folder``: one-token forwards after a short
    prefill, the median of ``STEPS``."""
    import mlx.core as mx

    from engine_mlx.models.target import TargetModel

    target = TargetModel.load(folder)
    cache = target.make_cache()
    mx.eval(target.forward(mx.arange(1, 33), cache).logits)
    times = []
    for step in range(STEPS):
        start = time.perf_counter()
        mx.eval(target.forward(mx.array([100 + step]), cache).logits)
        times.append(time.perf_counter() - start)
    return 1.0 / sorted(times)[len(times) // 2]
