"""The BLAS libraries MLX's CPU backend can use on Linux, found on this machine and loaded.

MLX's CPU wheel resolves ``cblas_sgemm`` from whichever library is loaded globally first; its
own bundled reference BLAS is many times slower. Candidates:

- **MKL** from the PyPI ``mkl`` and ``intel-openmp`` wheels (x86-64 only; their libraries sit
  in the environment's ``lib``), threaded by Intel's OpenMP runtime;
- **OpenBLAS** (``libopenblas0-pthread``) and **BLIS** (``libblis4-pthread``) from the system.

Which one is fastest depends on the CPU (MKL wins on an Intel Xeon, OpenBLAS on an AMD EPYC
we measured), so ``choice`` measures them. Stdlib only.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from engine_mlx.cpu.machine import cores

NAMES = ("openblas", "mkl", "blis")
LABELS = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS", "bundled": "MLX's bundled BLAS"}


@dataclass(frozen=True)
class Candidate:
    """A BLAS found here: the libraries to load globally, in order (the last has cblas)."""

    name: str  # "openblas", "mkl" or "blis"
    paths: tuple[str, ...]

    @property
    def label(self) -> str:
        return LABELS[self.name]

    def fingerprint(self) -> str:
        """Paths, sizes and modification times: a changed install invalidates a measurement."""
        parts = []
        for path in self.paths:
            try:
                stat = Path(path).stat()
                parts.append(f"{path}:{stat.st_size}:{int(stat.st_mtime)}")
            except OSError:
                parts.append(f"{path}:?")
        return ";".join(parts)


@dataclass
class Loaded:
    """A BLAS loaded into this process: its handle, version and threads."""

    candidate: Candidate
    library: ctypes.CDLL
    version: str
    threads: int


def find(name: str) -> Candidate | None:
    """The candidate called ``name`` if its libraries are on this machine."""
    if name == "mkl":
        return _find_mkl()
    if name == "openblas":
        return _find_system("openblas", ("libopenblas.so.0", "libopenblas.so"))
    if name == "blis":
        return _find_system("blis", ("libblis.so.4", "libblis.so"))
    raise ValueError(f"unknown BLAS {name!r}: use one of {', '.join(NAMES)} or bundled")


def available() -> list[Candidate]:
    return [c for c in (find(name) for name in NAMES) if c is not None]


def load(candidate: Candidate) -> Loaded:
    """Load ``candidate`` globally (before MLX), with one thread per available core.

    Raises ``OSError`` when a library does not load."""
    _set_threads(candidate.name, cores())
    library = None
    for path in candidate.paths:
        library = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    assert library is not None
    library.cblas_sgemm  # noqa: B018  (raises AttributeError -> not a CBLAS)
    return Loaded(candidate, library, _version(candidate.name, library), _threads(library))


def bundled() -> ctypes.CDLL | None:
    """MLX's own reference BLAS (the ``mlx_cpu.libs`` beside the ``mlx`` package), loaded
    locally; found without importing MLX."""
    spec = importlib.util.find_spec("mlx")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))).parent / "mlx_cpu.libs"
    for path in sorted(folder.glob("libblas*.so*")):
        try:
            return ctypes.CDLL(str(path))
        except OSError:
            continue
    return None


def _find_mkl() -> Candidate | None:
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    lib = Path(sys.prefix) / "lib"
    openmp = lib / "libiomp5.so"
    for name in ("libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so"):
        if (lib / name).exists() and openmp.exists():
            return Candidate("mkl", (str(openmp), str(lib / name)))
    return None


def _find_system(name: str, sonames: tuple[str, ...]) -> Candidate | None:
    known = _linker_cache()
    for soname in sonames:
        path = known.get(soname)
        if path and Path(path).exists():
            return Candidate(name, (os.path.realpath(path),))
    return None


@cache
def _linker_cache() -> dict[str, str]:
    """soname -> path for this machine's architecture, from ``ldconfig -p``."""
    arch = "x86-64" if platform.machine() == "x86_64" else ""
    for ldconfig in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            out = subprocess.run(
                [ldconfig, "-p"], capture_output=True, text=True, timeout=30
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        found: dict[str, str] = {}
        for line in out.splitlines():
            soname, _, rest = line.strip().partition(" (")
            kind, _, path = rest.partition(") => ")
            if path and (not arch or arch in kind):
                found.setdefault(soname, path)
        return found
    return {}


def _set_threads(name: str, count: int) -> None:
    """Threads are read from the environment when a library starts; user settings win."""
    variables = {
        "mkl": ("MKL_NUM_THREADS",),
        "openblas": ("OPENBLAS_NUM_THREADS",),
        "blis": ("BLIS_NUM_THREADS",),
    }[name]
    for variable in variables:
        os.environ.setdefault(variable, str(count))
    if name == "mkl":
        os.environ.setdefault("MKL_THREADING_LAYER", "INTEL")


def _version(name: str, library: ctypes.CDLL) -> str:
    try:
        if name == "openblas":
            library.openblas_get_config.restype = ctypes.c_char_p
            config = library.openblas_get_config().decode(errors="replace").split()
            return config[1] if len(config) > 1 else ""
        if name == "mkl":
            buffer = ctypes.create_string_buffer(256)
            library.MKL_Get_Version_String(buffer, len(buffer))
            words = buffer.value.decode(errors="replace").split()
            return next((w.split("-")[0] for w in words if w[:1].isdigit()), "")
        if name == "blis":
            library.bli_info_get_version_str.restype = ctypes.c_char_p
            return library.bli_info_get_version_str().decode(errors="replace")
    except (AttributeError, OSError):
        pass
    return ""


def _threads(library: ctypes.CDLL) -> int:
    for getter in ("openblas_get_num_threads", "MKL_Get_Max_Threads", "bli_thread_get_num_threads"):
        try:
            function = getattr(library, getter)
        except AttributeError:
            continue
        function.restype = ctypes.c_int
        return int(function())
    return 0
