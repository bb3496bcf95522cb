"""The gated MLP activation (``silu(gate) * up``) of the target's forward, formulated per backend.

MLX's CPU backend evaluates ``exp`` element by element (~14 ns each here; numpy's vectorised
``exp`` ~1 ns), and the SiLU of every MLP needs one per hidden unit and token: over a verify
block of 8 tokens on Qwen2.5-0.5B (4,864 units) that was 0.53 ms a layer; numpy does it in
0.16 ms. So, as ``models.attention`` does for the softmax, inside the engine's forward on the
CPU in fp32 the gate goes through numpy once it has ``MIN_ELEMENTS`` elements; below that
(one decoding row) leaving MLX's graph costs more than it saves. Measured on the 2-core CPU,
a forward over 8 tokens at depth 160, median of 9, side by side: Qwen2.5-Coder-0.5B 102.2 ->
91.0 ms, SmolLM2-135M 51.5 -> 41.3 ms; one token unchanged (60.9 / 60.7, 30.2 / 28.9 ms).

mlx-lm's MLP modules call the ``swiglu`` of their own module; ``install`` points that name at
a dispatcher that takes this path only while ``attention.active`` says the engine's forward
runs, so an mlx-lm baseline in the same process keeps mlx-lm's behaviour.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np

from engine_mlx.models import attention

MIN_ELEMENTS = 8192  # gate elements below which MLX's own kernel is kept (one decoding row)

_originals: dict[str, Any] = {}


def numpy_swiglu(gate: mx.array, up: mx.array) -> mx.array:
    """``silu(gate) * up`` with the exponential in numpy."""
    g = np.asarray(gate)
    with np.errstate(over="ignore", under="ignore"):  # saturated gates: silu -> -0 or g
        silu = g / (1.0 + np.exp(-g))
    return mx.array(silu) * up


def _dispatch(gate: mx.array, up: mx.array) -> mx.array:
    if attention.engine_forward_on_cpu() and gate.dtype == mx.float32 and gate.size >= MIN_ELEMENTS:
        return numpy_swiglu(gate, up)
    return _originals["swiglu"](gate, up)


def install(module_names: set[str]) -> None:
    """Route the named mlx-lm modules' ``swiglu`` through the dispatcher."""
    from mlx_lm.models import activations

    _originals.setdefault("swiglu", activations.swiglu)
    attention.route(module_names, "swiglu", _dispatch)
