"""Read a GGUF file: header, metadata and tensors, with errors that say what is wrong.

The importer needs more than a parser: a truncated download, a GGUF version 1 file or a tensor
type nothing here can dequantize must each become a :class:`GGUFImportError` naming the file,
never a crash or silent garbage.  Tensor data is read by ``mx.load`` where it is exact and fast,
and by gguf-py's numpy dequantizers otherwise.
"""

from __future__ import annotations

import logging
import math
import mmap
import os
import struct
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

from engine_mlx.errors import GGUFImportError

log = logging.getLogger(__name__)

_T = GGMLQuantizationType
# mx.load dequantizes these itself (or returns them as MLX-quantized triples); anything else
# goes through gguf-py's numpy dequantizers, because mx.load turns e.g. Q4_K or BF16 into
# float16 (lossy for BF16, whose range float16 cannot hold).
_MX_NATIVE_TYPES = frozenset({_T.F32, _T.F16, _T.Q4_0, _T.Q4_1, _T.Q8_0})
_MX_QUANT_BITS = {_T.Q4_0: 4, _T.Q4_1: 4, _T.Q8_0: 8}
GGUF_GROUP = 32  # the weights per block of those types, MLX's group size for them

# GGUF metadata value types (the on-disk type ids of the GGUF spec).
_SCALAR_FORMATS: dict[int, tuple[str, Any]] = {
    0: ("<B", np.uint8),
    1: ("<b", np.int8),
    2: ("<H", np.uint16),
    3: ("<h", np.int16),
    4: ("<I", np.uint32),
    5: ("<i", np.int32),
    6: ("<f", np.float32),
    7: ("<?", np.bool_),
    10: ("<Q", np.uint64),
    11: ("<q", np.int64),
    12: ("<d", np.float64),
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # GGUF order: dims[0] is the contiguous (innermost) axis
    qtype: int
    offset: int  # relative to the start of the data section
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """Row-major (numpy/HF) shape."""
        return tuple(reversed(self.dims))

    @property
    def type_name(self) -> str:
        try:
            return _T(self.qtype).name
        except ValueError:
            return f"type id {self.qtype}"


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    size: int
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]
    data_start: int


# --------------------------------------------------------------------------------------------
# Header parsing (tensor data is read by mx.load or numpy memmap)
# --------------------------------------------------------------------------------------------


class _HeaderEnd(Exception):
    """The header asks for more bytes than the file has."""


class _Cursor:
    """Little-endian reader over the mapped file that never reads past its end."""

    def __init__(self, buf: mmap.mmap) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)

    def take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > self.end:
            raise _HeaderEnd
        self.pos = start + n
        return start

    def unpack(self, fmt: str, size: int) -> Any:
        return struct.unpack_from(fmt, self.buf, self.take(size))[0]

    def string(self) -> str:
        n = self.unpack("<Q", 8)
        start = self.take(n)
        return str(self.buf[start : start + n], "utf-8", "replace")

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype = self.unpack("<I", 4)
            count = self.unpack("<Q", 8)
            if count > self.end - self.pos:  # every element takes at least one byte
                raise _HeaderEnd
            if etype in _SCALAR_FORMATS:
                np_type = _SCALAR_FORMATS[etype][1]
                width = np.dtype(np_type).itemsize
                start = self.take(count * width)
                return np.frombuffer(self.buf, dtype=np_type, count=count, offset=start).copy()
            return [self.value(etype) for _ in range(count)]
        if vtype in _SCALAR_FORMATS:
            fmt = _SCALAR_FORMATS[vtype][0]
            return self.unpack(fmt, struct.calcsize(fmt))  # "<?" already gives a bool
        raise ValueError(f"unknown metadata value type {vtype}")


def read_gguf(src: Path) -> GGUFFile:
    """Parse the GGUF header and check the tensor data is all there.

    Done by hand (not with mx.load) because mx.load may crash or read garbage on a truncated
    or corrupt file, and (not with gguf.GGUFReader) because that takes seconds on a 50k-token
    vocabulary; this takes ~0.1 s and gives messages that say what is wrong.
    """
    name = src.name
    try:
        with open(src, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(4)
            if size == 0:
                raise GGUFImportError(f"{name} is empty (0 bytes)")
            if head != b"GGUF":
                if len(head) < 4 and b"GGUF".startswith(head):
                    raise GGUFImportError(f"{name} is truncated: the file is only {size} bytes")
                raise GGUFImportError(
                    f"{name} is not a GGUF file (it does not start with the 'GGUF' magic)"
                )
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse_header(src, buf, size)
    except OSError as exc:
        raise GGUFImportError(f"Cannot read GGUF file {src}: {exc}") from exc


def _parse_header(src: Path, buf: mmap.mmap, size: int) -> GGUFFile:
    name = src.name
    cur = _Cursor(buf)
    cur.take(4)  # magic, checked by the caller
    try:
        version = cur.unpack("<I", 4)
        if version not in (2, 3):
            if version == 1:
                raise GGUFImportError(
                    f"{name} is a GGUF version 1 file; re-download or re-convert it "
                    "with a current llama.cpp (version 2 or 3 is needed)"
                )
            if struct.unpack(">I", struct.pack("<I", version))[0] in (2, 3):
                raise GGUFImportError(f"{name} is a big-endian GGUF file, which is unsupported")
            raise GGUFImportError(f"{name} has unsupported GGUF version {version}")
        n_tensors = cur.unpack("<Q", 8)
        n_kv = cur.unpack("<Q", 8)
        if n_tensors > size or n_kv > size:
            raise GGUFImportError(f"{name} is corrupt: its header counts are impossible")

        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.unpack("<I", 4)
            try:
                metadata[key] = cur.value(vtype)
            except ValueError as exc:
                raise GGUFImportError(f"{name} is corrupt: metadata key '{key}': {exc}") from None

        tensors: dict[str, TensorInfo] = {}
        for _ in range(n_tensors):
            tname = cur.string()
            n_dims = cur.unpack("<I", 4)
            if not 1 <= n_dims <= 4:
                raise GGUFImportError(
                    f"{name} is corrupt: tensor '{tname}' claims {n_dims} dimensions"
                )
            dims = tuple(cur.unpack("<Q", 8) for _ in range(n_dims))
            qtype = cur.unpack("<I", 4)
            offset = cur.unpack("<Q", 8)
            tensors[tname] = TensorInfo(tname, dims, qtype, offset, _tensor_nbytes(dims, qtype))
        header_end = cur.pos
    except _HeaderEnd:
        raise GGUFImportError(
            f"{name} is truncated or corrupt: its header runs past the end of the file "
            f"({size:,} bytes)"
        ) from None

    alignment = metadata.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFImportError(f"{name} is corrupt: general.alignment = {alignment!r}")
    data_start = -(-header_end // alignment) * alignment

    for info in tensors.values():
        if info.offset % alignment:
            raise GGUFImportError(f"{name} is corrupt: tensor '{info.name}' is misaligned")
    expected = max((t.offset + t.nbytes for t in tensors.values() if t.nbytes >= 0), default=0)
    found = max(0, size - data_start)
    if found < expected:
        raise GGUFImportError(
            f"{name} is truncated: expected {expected:,} bytes of tensor data, "
            f"found {found:,} (the download or copy was probably interrupted)"
        )
    return GGUFFile(src, size, metadata, tensors, data_start)


def _tensor_nbytes(dims: tuple[int, ...], qtype: int) -> int:
    """Byte size of a tensor, or -1 for a type we do not know (reported later, by name)."""
    try:
        block, type_size = GGML_QUANT_SIZES[_T(qtype)]
    except (ValueError, KeyError):
        return -1
    n = math.prod(dims)
    return n // block * type_size if dims[0] % block == 0 else -1


# --------------------------------------------------------------------------------------------
# Accessors
# --------------------------------------------------------------------------------------------


def meta(
    g: GGUFFile, key: str, kind: type | tuple[type, ...], what: str, default: Any = ...
) -> Any:
    """Read one metadata value, or say which key is missing/wrong and what it is for."""
    if key not in g.metadata:
        if default is not ...:
            return default
        raise GGUFImportError(f"{g.path.name} is missing metadata '{key}' ({what})")
    value = g.metadata[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise GGUFImportError(
            f"{g.path.name} has an invalid metadata value for '{key}' ({what}): {value!r:.80}"
        )
    return value


def require_tensor(g: GGUFFile, tname: str) -> TensorInfo:
    info = g.tensors.get(tname)
    if info is None:
        raise GGUFImportError(f"{g.path.name} is missing tensor '{tname}'")
    return info


# --------------------------------------------------------------------------------------------
# Tensor data
# --------------------------------------------------------------------------------------------


@cache
def numpy_can_dequantize(qtype: int) -> bool:
    """Whether gguf-py can dequantize this type (our fallback for what mx.load cannot)."""
    try:
        t = _T(qtype)
    except ValueError:
        return False
    if t in (_T.F32, _T.F16, _T.F64):
        return True
    block, type_size = GGML_QUANT_SIZES[t]
    try:
        out = quants.dequantize(np.zeros((1, type_size), dtype=np.uint8), t)
    except (NotImplementedError, ValueError, KeyError):
        return False
    return out.dtype.kind == "f" and out.shape == (1, block)


def read_tensor_numpy(g: GGUFFile, info: TensorInfo) -> np.ndarray:
    """One tensor as float32 in row-major shape, straight from the file (no mx.load)."""
    start = g.data_start + info.offset
    raw = np.memmap(g.path, dtype=np.uint8, mode="r", offset=start, shape=(info.nbytes,))
    t = _T(info.qtype)
    if t == _T.F32:
        return np.array(raw.view(np.float32).reshape(info.shape))
    if t == _T.F16:
        return raw.view(np.float16).reshape(info.shape).astype(np.float32)
    if t == _T.F64:
        return raw.view(np.float64).reshape(info.shape).astype(np.float32)
    rows = np.asarray(raw).reshape(*info.shape[:-1], -1)
    return quants.dequantize(rows, t).astype(np.float32, copy=False).reshape(info.shape)


def load_mx_native(g: GGUFFile) -> dict[str, mx.array] | None:
    """All tensors via mx.load when it can handle every type, else None (numpy path)."""
    if any(t.qtype not in _MX_NATIVE_TYPES for t in g.tensors.values()):
        return None
    try:
        return mx.load(str(g.path))  # type: ignore[return-value]
    except (RuntimeError, ValueError) as exc:
        log.warning("mx.load failed on %s (%s); using the slower numpy path", g.path.name, exc)
        return None


def take_dequantized(g: GGUFFile, loaded: dict[str, mx.array] | None, info: TensorInfo) -> mx.array:
    """The tensor as float32 (exactly what llama.cpp's dequantization gives).

    ``loaded`` is :func:`load_mx_native`'s result (None: read from the file with numpy).  The
    tensor's entries are removed from it, so the quantized source is freed once it is used.
    """
    if loaded is None:
        return mx.array(read_tensor_numpy(g, info))
    base = info.name.removesuffix(".weight")
    weight = loaded.pop(info.name, None)
    scales, biases = loaded.pop(base + ".scales", None), loaded.pop(base + ".biases", None)
    if weight is None:
        raise GGUFImportError(f"{g.path.name}: mx.load did not return tensor '{info.name}'")
    if info.qtype in _MX_QUANT_BITS:
        if scales is None or biases is None:
            raise GGUFImportError(f"{g.path.name}: mx.load did not dequantize '{info.name}'")
        # float32 scales/biases: the dequantization is then bit-exact w.r.t. llama.cpp's.
        scales, biases = scales.astype(mx.float32), biases.astype(mx.float32)
        bits = _MX_QUANT_BITS[_T(info.qtype)]
        weight = mx.dequantize(weight, scales, biases, group_size=GGUF_GROUP, bits=bits)
    return weight.astype(mx.float32)


def take_quantized(
    loaded: dict[str, mx.array] | None, info: TensorInfo
) -> tuple[mx.array, mx.array, mx.array, int] | None:
    """The tensor as MLX's affine-quantized triple (packed weights, scales, biases, bits), or
    None where it is not a type MLX holds exactly (then :func:`take_dequantized` reads it).

    Q4_0, Q4_1 and Q8_0 are blocks of 32 weights with one float16 step (and offset): MLX's
    affine layout in groups of 32 holds them as they are (``mx.load`` translates them), so the
    weights stay the file's own bits and a quarter (8-bit: half) of float16's bytes. The
    tensor's entries are removed from ``loaded``.
    """
    bits = _MX_QUANT_BITS.get(_T(info.qtype)) if info.qtype in _MX_QUANT_BITS else None
    if loaded is None or bits is None or len(info.shape) != 2:
        return None
    base = info.name.removesuffix(".weight")
    parts = [loaded.get(name) for name in (info.name, base + ".scales", base + ".biases")]
    if any(part is None for part in parts):
        return None
    for name in (info.name, base + ".scales", base + ".biases"):
        del loaded[name]
    weight, scales, biases = parts
    return weight, scales, biases, bits
