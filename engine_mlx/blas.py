"""Make MLX's CPU matrix products fast: load OpenBLAS before MLX is imported.

On Linux the CPU wheel of MLX ships a slow reference BLAS. Loading OpenBLAS into the process
with ``RTLD_GLOBAL`` *before* ``import mlx.core`` makes MLX's fp32 matmuls resolve to it
(loading it afterwards has no effect). Measured on a 2-core x86 CPU (MLX 0.32.4): a
[256x576]@[576x1536] fp32 matmul takes 130 ms with the bundled BLAS and 4.5 ms with OpenBLAS;
the matching gemv 0.72 ms vs 0.26 ms.

Stdlib only, and run by ``engine_mlx/__init__`` on import, so importing any part of the
engine loads the BLAS first, and the parts that need no MLX (``modes``) stay free of it.
Set ``FLASHCHAT_NO_OPENBLAS=1`` to keep the bundled BLAS (for side-by-side measurements).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_OPENBLAS_NAMES = ("libopenblas.so.0", "libopenblas.so", "libopenblasp-r0.3.21.so")
_status: str = "not attempted"


def preload_openblas() -> str:
    """Load OpenBLAS globally if we are on Linux, before MLX is imported. Returns a status."""
    global _status
    if _status != "not attempted":
        return _status
    if not sys.platform.startswith("linux"):
        _status = "not needed on this platform"
    elif os.environ.get("FLASHCHAT_NO_OPENBLAS", "") not in ("", "0"):
        _status = "disabled by FLASHCHAT_NO_OPENBLAS"
    elif "mlx.core" in sys.modules:
        _status = "too late: mlx.core was imported before engine_mlx"
    else:
        _status = "not found (apt-get install libopenblas0-pthread)"
        found = ctypes.util.find_library("openblas")
        for name in ((found,) if found else ()) + _OPENBLAS_NAMES:
            try:
                ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                continue
            _status = f"loaded ({name})"
            break
    return _status


def openblas_status() -> str:
    return _status
