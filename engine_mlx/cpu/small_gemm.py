"""Build and load the small-batch matrix product (``small_gemm.c``).

The C source is compiled here, on the machine that runs it, by the system C compiler with
``-march=native`` (so one source is AVX-512, AVX2 or NEON code), and cached by the hash of
source, flags, compiler and CPU under ``paths.kernel_cache_dir()``. Stdlib only: this runs
before MLX is imported, from ``engine_mlx.blas``.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from engine_mlx.cpu.machine import cpu_signature
from engine_mlx.paths import kernel_cache_dir

SOURCE = Path(__file__).with_name("small_gemm.c")
FLAGS = ("-O3", "-ffp-contract=fast", "-fPIC", "-shared", "-pthread")
MAX_ROWS = 32  # FC_MAX_ROWS in the C source


class BuildError(RuntimeError):
    """The product could not be built here; the message says why and what to install."""


def compiler() -> str:
    found = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not found:
        raise BuildError("no C compiler found (apt-get install gcc)")
    return found


def _included_sources(source: Path) -> list[str]:
    """The C files ``source`` includes, and theirs (``quant_layer.c`` builds on
    ``quant_gemm.c``, which includes ``quant_panels.c``)."""
    names = re.findall(r'^#include "([^"]+\.c)"', source.read_text(), flags=re.MULTILINE)
    return [n for name in names for n in (name, *_included_sources(source.with_name(name)))]


def library_path(march: str = "native", source: Path = SOURCE) -> Path:
    """The compiled library of ``source`` (this product, or another C file beside it), built
    now if the cache does not hold it. ``march`` other than native (``x86-64-v3``: AVX2,
    ``x86-64``: SSE2) builds the narrower code paths, for tests."""
    cc = compiler()
    flags = (*FLAGS, f"-march={march}")
    digest = hashlib.sha256()
    headers = [h.read_bytes() for h in sorted(source.parent.glob("*.h"))]  # vectors.h
    headers += [source.with_name(name).read_bytes() for name in _included_sources(source)]
    parts = (
        source.read_bytes(),
        *headers,
        " ".join(flags).encode(),
        _identity(cc),
        cpu_signature(),
    )
    for part in parts:
        part = part if isinstance(part, bytes) else part.encode()
        digest.update(part)
        digest.update(b"\0")
    target = kernel_cache_dir() / f"{source.stem}-{march}-{digest.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    os.close(fd)
    try:
        proc = subprocess.run(
            [cc, *flags, str(source), "-o", tmp], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        os.unlink(tmp)
        raise BuildError(f"the C compiler {cc} did not run: {exc}") from exc
    if proc.returncode != 0:
        os.unlink(tmp)
        first = (proc.stderr.strip().splitlines() or ["(no message)"])[0]
        raise BuildError(f"the C compiler {cc} rejected {source.name}: {first}")
    os.replace(tmp, target)
    return target


class SmallGemm:
    """The loaded library: its ``cblas_sgemm`` is global, so MLX's products reach it."""

    def __init__(self, path: Path, *, global_symbols: bool = True) -> None:
        self.path = path
        mode = ctypes.RTLD_GLOBAL if global_symbols else ctypes.RTLD_LOCAL
        self.library = ctypes.CDLL(str(path), mode=mode)
        lib = self.library
        lib.fc_set_fallback.argtypes = [ctypes.c_void_p]
        lib.fc_set_threads.argtypes = [ctypes.c_int]
        lib.fc_set_max_rows.argtypes = [ctypes.c_int]
        lib.fc_handled_calls.restype = ctypes.c_long
        lib.fc_forwarded_calls.restype = ctypes.c_long
        lib.fc_vector_width.restype = ctypes.c_int
        lib.fc_small_gemm.argtypes = [
            *(ctypes.c_int,) * 3,
            ctypes.c_float,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_float,
            ctypes.c_void_p,
            ctypes.c_int,
        ]

    def forward_to(self, blas: ctypes.CDLL) -> None:
        """Hand the products this library does not take to ``blas``'s cblas_sgemm."""
        self.library.fc_set_fallback(ctypes.cast(blas.cblas_sgemm, ctypes.c_void_p))

    def set_max_rows(self, rows: int) -> None:
        self.library.fc_set_max_rows(rows)

    def calls(self) -> tuple[int, int]:
        """(products taken here, products handed to the BLAS) since the process started."""
        return self.library.fc_handled_calls(), self.library.fc_forwarded_calls()

    def vector_width(self) -> int:
        """fp32 lanes per vector it was compiled for (16: AVX-512, 8: AVX2, 4: SSE/NEON)."""
        return self.library.fc_vector_width()

    def multiply(self, a: int, b: int, c: int, m: int, n: int, k: int) -> None:
        """``C[m,n] = A[m,k] @ B[n,k]^T`` on raw row-major fp32 buffers (for tests)."""
        self.library.fc_small_gemm(m, n, k, 1.0, a, k, b, k, 0.0, c, n)


def _identity(cc: str) -> bytes:
    try:
        return subprocess.run([cc, "--version"], capture_output=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"the C compiler {cc} did not run: {exc}") from exc
