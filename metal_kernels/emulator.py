"""The CPU emulator: runs a kernel body from a .metal file on the CPU, for the tests.

The body is compiled by the system C++ compiler against the CPU prelude into a shared library
(cached by content hash under ``engine_mlx.paths.kernel_cache_dir()``) and run over the
launch grid with the threads of each threadgroup as real concurrent threads, real barriers
and SIMD groups of 32 (see emulator_runtime.h). Arguments are passed as MLX would pass them:
inputs by pointer (copied to row-contiguous first unless the body indexes by strides), the
``_shape`` / ``_strides`` / ``_ndim`` companions the body names, then the outputs. Outputs
start poisoned (all bits set) unless an ``init_value`` is given, so an unwritten element
shows. ``sanitize="thread"`` builds a standalone executable with ThreadSanitizer instead and
returns its report alongside the outputs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from engine_mlx.paths import kernel_cache_dir
from metal_kernels.sources import KERNEL_DIR, KernelSource

RUNTIME_CPP = KERNEL_DIR / "emulator_runtime.cpp"
CXX_FLAGS = ("-std=c++17", "-O2", "-fno-strict-aliasing", "-pthread", "-w")
TSAN_FLAGS = ("-std=c++17", "-O1", "-g", "-fno-strict-aliasing", "-pthread", "-w")
TEMPLATE_VALUE = str | int | bool

# numpy dtype -> C++ type name as MLX spells it in generated signatures
_CTYPES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float16): "float16_t",
    np.dtype(np.int32): "int32_t",
    np.dtype(np.uint32): "uint32_t",
    np.dtype(np.int64): "int64_t",
    np.dtype(np.uint8): "uint8_t",
    np.dtype(np.int8): "int8_t",
    np.dtype(np.bool_): "bool",
}
_STORAGE = {v: k for k, v in _CTYPES.items()} | {"bfloat16_t": np.dtype(np.uint16)}


class EmulatorError(RuntimeError):
    """The kernel failed to compile, or misbehaved at run time (the message says how)."""


@dataclass(frozen=True)
class Typed:
    """An array whose C++ element type numpy cannot name (bf16 is stored as uint16)."""

    array: np.ndarray
    ctype: str


@dataclass(frozen=True)
class Output:
    shape: tuple[int, ...]
    ctype: str  # "float", "float16_t", "bfloat16_t", "int32_t", ...


@dataclass(frozen=True)
class TsanResult:
    outputs: list[np.ndarray]
    report: str  # ThreadSanitizer's warnings; empty when it found nothing

    @property
    def races(self) -> bool:
        return "WARNING: ThreadSanitizer" in self.report


def ctype_of(array: np.ndarray | Typed) -> str:
    if isinstance(array, Typed):
        return array.ctype
    try:
        return _CTYPES[array.dtype]
    except KeyError:
        raise EmulatorError(f"no kernel type for numpy dtype {array.dtype}") from None


def storage_dtype(ctype: str) -> np.dtype:
    return _STORAGE[ctype]


def compiler() -> str:
    found = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not found:
        raise EmulatorError("no C++ compiler found (apt-get install g++)")
    return found


def run(
    source: KernelSource,
    inputs: Sequence[np.ndarray | Typed],
    outputs: Sequence[Output],
    grid: tuple[int, int, int],
    threadgroup: tuple[int, int, int],
    template: Sequence[tuple[str, TEMPLATE_VALUE]] = (),
    init_value: float | None = None,
    teams: int = 2,
) -> list[np.ndarray]:
    """Run ``source`` over ``grid`` (in threads, as Metal's dispatchThreads) and return the
    outputs. ``teams`` threadgroups run at once (each with its own threads)."""
    args = _Arguments(source, inputs, outputs, init_value)
    library = _load(_build(source, args.signature(), template, sanitize=False))
    err = ctypes.create_string_buffer(1024)
    dims = (ctypes.c_long * 6)(*grid, *threadgroup)
    pointers = (ctypes.c_void_p * len(args.buffers))(*(b.ctypes.data for b in args.buffers))
    status = library.fc_launch(pointers, dims, int(teams), err, len(err))
    if status != 0:
        raise EmulatorError(f"{source.name}: {err.value.decode(errors='replace')}")
    return args.results()


def run_tsan(
    source: KernelSource,
    inputs: Sequence[np.ndarray | Typed],
    outputs: Sequence[Output],
    grid: tuple[int, int, int],
    threadgroup: tuple[int, int, int],
    template: Sequence[tuple[str, TEMPLATE_VALUE]] = (),
    init_value: float | None = None,
    teams: int = 2,
) -> TsanResult:
    """Like ``run``, in a ThreadSanitizer build (a separate process: TSan must own it).
    Inputs travel as contiguous copies (their strides describe the copies)."""
    args = _Arguments(source, inputs, outputs, init_value, contiguous=True)
    exe = _build(source, args.signature(), template, sanitize=True)
    with tempfile.TemporaryDirectory(prefix="fc_tsan_") as tmp:
        blob_in, blob_out = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        header = np.array([len(args.buffers), *grid, *threadgroup, teams], dtype=np.int64)
        with open(blob_in, "wb") as f:
            f.write(header.tobytes())
            for b in args.buffers:
                f.write(np.array([b.nbytes], dtype=np.int64).tobytes())
                f.write(np.ascontiguousarray(b).tobytes())
        env = {**os.environ, "TSAN_OPTIONS": "halt_on_error=0 exitcode=0 history_size=4"}
        proc = subprocess.run(
            [str(exe), str(blob_in), str(blob_out)], capture_output=True, text=True, env=env
        )
        if proc.returncode != 0:
            raise EmulatorError(f"{source.name} (TSan build): {proc.stdout}{proc.stderr}")
        data = blob_out.read_bytes()
    offset = 0
    for b in args.buffers[args.first_output :]:
        b.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, np.uint8, b.nbytes, offset)
        offset += b.nbytes
    return TsanResult(args.results(), proc.stderr)


class _Arguments:
    """The buffers of one launch, in the order the generated wrapper reads them."""

    def __init__(
        self,
        source: KernelSource,
        inputs: Sequence[np.ndarray | Typed],
        outputs: Sequence[Output],
        init_value: float | None,
        contiguous: bool = False,
    ) -> None:
        if len(inputs) != len(source.inputs) or len(outputs) != len(source.outputs):
            raise EmulatorError(
                f"{source.name} takes inputs {source.inputs} and outputs {source.outputs}"
            )
        self.params: list[tuple[str, str]] = []  # (C++ declaration type, name)
        self.buffers: list[np.ndarray] = []
        for name, value in zip(source.inputs, inputs, strict=True):
            ctype = ctype_of(value)
            array = value.array if isinstance(value, Typed) else value
            if array.dtype != storage_dtype(ctype):
                raise EmulatorError(f"{name}: {ctype} is stored as {storage_dtype(ctype)}")
            if source.row_contiguous or contiguous or array.ndim == 0:
                array = np.ascontiguousarray(array)
            self.params.append((f"const {ctype}*", name))
            self.buffers.append(array)
            has_shape, has_strides, has_ndim = source.shape_info(name)
            if array.ndim == 0:
                continue
            if has_shape:
                self.params.append(("const int*", f"{name}_shape"))
                self.buffers.append(np.array(array.shape, dtype=np.int32))
            if has_strides:
                if any(s % array.itemsize for s in array.strides):
                    raise EmulatorError(f"{name}: strides are not whole elements")
                self.params.append(("const int64_t*", f"{name}_strides"))
                self.buffers.append(np.array(array.strides, dtype=np.int64) // array.itemsize)
            if has_ndim:
                self.params.append(("ndim", f"{name}_ndim"))
                self.buffers.append(np.array([array.ndim], dtype=np.int32))
        self.first_output = len(self.buffers)
        self.outputs = list(outputs)
        for name, out in zip(source.outputs, outputs, strict=True):
            storage = storage_dtype(out.ctype)
            if init_value is None:
                buf = np.empty(out.shape, dtype=storage)
                buf.reshape(-1).view(np.uint8)[:] = 0xFF
            else:
                buf = np.full(out.shape, init_value).astype(storage)
            self.params.append((f"{out.ctype}*", name))
            self.buffers.append(buf)

    def signature(self) -> tuple[tuple[str, str], ...]:
        return tuple(self.params)

    def results(self) -> list[np.ndarray]:
        return self.buffers[self.first_output :]


@cache
def _compiler_identity(cxx: str) -> str:
    proc = subprocess.run([cxx, "--version"], capture_output=True, text=True)
    return proc.stdout.splitlines()[0] if proc.stdout else cxx


def _translation_unit(
    source: KernelSource,
    params: tuple[tuple[str, str], ...],
    template: Sequence[tuple[str, TEMPLATE_VALUE]],
    standalone: bool,
) -> str:
    given = {name for name, _ in template}
    if given != set(source.template):
        raise EmulatorError(f"{source.name} takes template arguments {source.template}")
    constants = []
    for name, value in template:
        if isinstance(value, bool):
            constants.append(f"  constexpr bool {name} = {'true' if value else 'false'};")
        elif isinstance(value, int):
            constants.append(f"  constexpr int {name} = {value};")
        else:
            constants.append(f"  using {name} = {value};")
    decls = []
    unpack = []
    for i, (ctype, name) in enumerate(params):
        if ctype == "ndim":
            decls.append(f"const int {name}")
            unpack.append(f"*static_cast<const int*>(fc_args[{i}])")
        else:
            decls.append(f"{ctype} {name}")
            unpack.append(f"static_cast<{ctype}>(fc_args[{i}])")
    lines = [
        '#include "prelude_cpu.h"',
        "namespace {",
        f"void fc_body(fc_emu::Thread& fc_ctx, {', '.join(decls)}) {{",
        *constants,
        f'#line {source.body_line} "{source.file}"',
        source.body,
        "}",
        f'#line 1 "{source.name}_wrapper.cpp"',
        "void fc_entry(fc_emu::Thread& fc_ctx, void* const* fc_args) {",
        f"  fc_body(fc_ctx, {', '.join(unpack)});",
        "}",
        "}  // namespace",
        'extern "C" int fc_launch(void* const* fc_args, const long* fc_dims, int fc_teams,',
        "                         char* fc_err, long fc_errlen) {",
        "  return fc_emu::fc_emu_launch(fc_dims, fc_teams, fc_err, fc_errlen, fc_entry, fc_args);",
        "}",
    ]
    if standalone:
        lines.append(_STANDALONE_MAIN.replace("@FIRST_OUTPUT@", str(_first_output(params))))
    return "\n".join(lines) + "\n"


def _first_output(params: tuple[tuple[str, str], ...]) -> int:
    return next(i for i, (ctype, _) in enumerate(params) if not ctype.startswith(("const", "nd")))


_STANDALONE_MAIN = r"""
#include <fstream>
#include <vector>
int main(int argc, char** argv) {
  if (argc != 3) return 2;
  std::ifstream in(argv[1], std::ios::binary);
  int64_t header[8];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  const int64_t count = header[0];
  std::vector<std::vector<char>> buffers(count);
  std::vector<void*> args(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t size = 0;
    in.read(reinterpret_cast<char*>(&size), sizeof size);
    buffers[i].resize(size > 0 ? size : 1);
    in.read(buffers[i].data(), size);
    args[i] = buffers[i].data();
  }
  long dims[6];
  for (int i = 0; i < 6; ++i) dims[i] = static_cast<long>(header[1 + i]);
  char err[1024] = {0};
  if (fc_launch(args.data(), dims, static_cast<int>(header[7]), err, sizeof err) != 0) {
    std::fprintf(stdout, "%s\n", err);
    return 1;
  }
  std::ofstream out(argv[2], std::ios::binary);
  for (int64_t i = @FIRST_OUTPUT@; i < count; ++i) {
    out.write(buffers[i].data(), static_cast<std::streamsize>(buffers[i].size()));
  }
  return 0;
}
"""


def _build(
    source: KernelSource,
    params: tuple[tuple[str, str], ...],
    template: Sequence[tuple[str, TEMPLATE_VALUE]],
    sanitize: bool,
) -> Path:
    """Compile (or find in the cache) the library / TSan executable for this launch shape.
    The shared library links the runtime library (built once); the TSan executable compiles
    runtime and kernel together."""
    unit = _translation_unit(source, params, template, standalone=sanitize)
    if sanitize:
        flags = (*TSAN_FLAGS, "-fsanitize=thread")
        runtime = _runtime((*flags, "-c"), "emulator_runtime_tsan.o")
        return _compile(unit, source.name, flags, "kernel_tsan", (str(runtime),), str(runtime))
    flags = (*CXX_FLAGS, "-fPIC", "-shared")
    runtime = _runtime(flags, "libfc_emu.so")
    link = (str(runtime), f"-Wl,-rpath,{runtime.parent}")
    return _compile(unit, source.name, flags, "kernel.so", link, str(runtime))


def _runtime(flags: tuple[str, ...], filename: str) -> Path:
    """The runtime, compiled once per flag set: a shared library, or a TSan object file."""
    text = RUNTIME_CPP.read_text(encoding="utf-8")
    return _compile(text, "emulator_runtime", flags, filename)


def _compile(
    unit: str,
    name: str,
    flags: tuple[str, ...],
    filename: str,
    extra: tuple[str, ...] = (),
    salt: str = "",
) -> Path:
    cxx = compiler()
    digest = hashlib.sha256()
    for part in (
        unit,
        " ".join(flags),
        salt,
        _compiler_identity(cxx),
        (KERNEL_DIR / "prelude_cpu.h").read_text(encoding="utf-8"),
        (KERNEL_DIR / "emulator_runtime.h").read_text(encoding="utf-8"),
        RUNTIME_CPP.read_text(encoding="utf-8"),
    ):
        digest.update(part.encode())
        digest.update(b"\0")
    folder = kernel_cache_dir() / digest.hexdigest()[:24]
    target = folder / filename
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    cpp = folder / f"{name}.cpp"
    cpp.write_text(unit, encoding="utf-8")
    fd, tmp_name = tempfile.mkstemp(dir=folder, suffix=".tmp")
    os.close(fd)
    cmd = [cxx, *flags, "-I", str(KERNEL_DIR), str(cpp), *extra, "-o", tmp_name]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        os.unlink(tmp_name)
        raise EmulatorError(f"{name}: the C++ compiler rejected it:\n{proc.stderr}")
    os.replace(tmp_name, target)
    return target


@cache
def _load(path: Path) -> ctypes.CDLL:
    library = ctypes.CDLL(str(path))
    library.fc_launch.restype = ctypes.c_int
    library.fc_launch.argtypes = [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_long),
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_long,
    ]
    return library
