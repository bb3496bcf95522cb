"""Kernel sources: one ``.metal`` file, three ways to run it.

Each ``metal_kernels/*.metal`` file is a complete Metal Shading Language translation unit: it
includes the Metal prelude and defines its kernels with full signatures, so it compiles on its
own (``xcrun metal -c``). Between ``// FC_BODY_BEGIN`` and ``// FC_BODY_END`` each kernel has
its body, written in the portable dialect (``FC_*`` macros). That body is what
``mx.fast.metal_kernel`` and ``mx.fast.cuda_kernel`` take (MLX generates the signature) and
what the CPU emulator compiles. The loader reads the parameter list from the signature, so the
names and order of inputs and outputs the Python side launches with come from the same file
as the body and cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent
PRELUDES = {"metal": "prelude_metal.h", "cuda": "prelude_cuda.h", "cpu": "prelude_cpu.h"}

# The attributes mx.fast.metal_kernel adds to a signature when the body names them, with the
# types it declares them with (MLX's metal_kernel.cpp).
METAL_ATTRIBUTES = {
    "dispatch_quadgroups_per_threadgroup": "uint",
    "dispatch_simdgroups_per_threadgroup": "uint",
    "dispatch_threads_per_threadgroup": "uint3",
    "grid_origin": "uint3",
    "grid_size": "uint3",
    "quadgroup_index_in_threadgroup": "uint",
    "quadgroups_per_threadgroup": "uint",
    "simdgroup_index_in_threadgroup": "uint",
    "simdgroups_per_threadgroup": "uint",
    "thread_execution_width": "uint",
    "thread_index_in_quadgroup": "uint",
    "thread_index_in_simdgroup": "uint",
    "thread_index_in_threadgroup": "uint",
    "thread_position_in_grid": "uint3",
    "thread_position_in_threadgroup": "uint3",
    "threadgroup_position_in_grid": "uint3",
    "threadgroups_per_grid": "uint3",
    "threads_per_grid": "uint3",
    "threads_per_simdgroup": "uint",
    "threads_per_threadgroup": "uint3",
}

# Which attribute each dialect id needs on Metal.
MACRO_ATTRIBUTES = {
    "FC_TID_": "thread_position_in_threadgroup",
    "FC_TG_ID_": "threadgroup_position_in_grid",
    "FC_GID_": "thread_position_in_grid",
    "FC_TG_SIZE_": "threads_per_threadgroup",
    "FC_NUM_TG_": "threadgroups_per_grid",
    "FC_THREAD_INDEX": "thread_index_in_threadgroup",
    "FC_THREADS_PER_TG": "threads_per_threadgroup",
    "FC_SIMD_LANE": "thread_index_in_simdgroup",
    "FC_SIMD_ID": "simdgroup_index_in_threadgroup",
    "FC_NUM_SIMDS": "simdgroups_per_threadgroup",
    "FC_SIMD_WIDTH_LIVE": "threads_per_simdgroup",
}

SHAPE_SUFFIXES = ("_shape", "_strides", "_ndim")


class KernelSourceError(ValueError):
    """A .metal file does not follow the layout the loader and the dialect expect."""


@dataclass(frozen=True)
class KernelSource:
    """One kernel: its body and what its signature declares."""

    name: str
    file: str
    template: tuple[str, ...]  # template parameter names, in order
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    output_types: tuple[str, ...]
    attributes: tuple[str, ...]
    shape_params: tuple[str, ...]  # e.g. "q_strides": MLX adds them when the body names them
    atomic_outputs: bool
    body: str
    body_line: int  # line of the body's first line in the file (for compiler messages)

    @property
    def row_contiguous(self) -> bool:
        """MLX copies inputs to row-contiguous unless the body indexes them by strides."""
        return not self.shape_params

    def shape_info(self, name: str) -> tuple[bool, bool, bool]:
        """(shape, strides, ndim) passed for input ``name``, decided as MLX does: by name."""
        return tuple(f"{name}{suffix}" in self.body for suffix in SHAPE_SUFFIXES)  # type: ignore[return-value]

    def body_for(self, backend: str) -> str:
        """The ``source`` string for MLX. On Metal a leading comment names the attributes the
        signature declares, because MLX adds an attribute only when its name is in the body
        and the body itself names only dialect macros."""
        if backend == "metal" and self.attributes:
            return f"// attributes: {' '.join(self.attributes)}\n{self.body}"
        return self.body


def prelude(backend: str) -> str:
    """The dialect's prelude for ``backend`` ("metal", "cuda" or "cpu")."""
    return (KERNEL_DIR / PRELUDES[backend]).read_text(encoding="utf-8")


@cache
def all_kernels() -> dict[str, KernelSource]:
    """Every kernel of every .metal file in the package, by name."""
    kernels: dict[str, KernelSource] = {}
    for path in sorted(KERNEL_DIR.glob("*.metal")):
        for source in parse(path.read_text(encoding="utf-8"), path.name):
            if source.name in kernels:
                raise KernelSourceError(f"kernel {source.name} is defined twice")
            kernels[source.name] = source
    return kernels


def kernel(name: str) -> KernelSource:
    try:
        return all_kernels()[name]
    except KeyError:
        raise KeyError(f"no kernel named {name!r} in {KERNEL_DIR}") from None


_KERNEL_RE = re.compile(
    r"(?:template\s*<(?P<template>[^>]*)>\s*)?\[\[kernel\]\]\s+void\s+(?P<name>\w+)\s*\("
)
_INPUT_RE = re.compile(
    r"^const\s+(?:device|constant)\s+(?P<type>[\w:<>\s]+?)\s*[*&]\s*(?P<name>\w+)$"
)
_OUTPUT_RE = re.compile(r"^device\s+(?P<type>[\w:<>\s]+?)\s*\*\s*(?P<name>\w+)$")
_ATTRIBUTE_RE = re.compile(r"^(?P<type>uint3?|ushort3?)\s+(?P<name>\w+)$")
_ANNOTATION_RE = re.compile(r"\[\[\s*(?P<what>[^\]]*?)\s*\]\]")


def parse(text: str, filename: str = "<string>") -> list[KernelSource]:
    """The kernels of one .metal file (see the module docstring for the layout)."""
    found = []
    for match in _KERNEL_RE.finditer(text):
        name = match["name"]
        params_text, after = _balanced(text, match.end() - 1, filename, name)
        begin = text.find("// FC_BODY_BEGIN", after)
        end = text.find("// FC_BODY_END", begin)
        brace = text.find("{", after)
        if begin < 0 or end < 0 or brace < 0 or text[after:brace].strip():
            raise KernelSourceError(
                f"{filename}: kernel {name} needs `) {{` then // FC_BODY_BEGIN ... // FC_BODY_END"
            )
        if text.find("[[kernel]]", after, end) >= 0:
            raise KernelSourceError(f"{filename}: kernel {name}: body markers out of place")
        body_start = text.index("\n", begin) + 1
        body = text[body_start:end].rstrip(" ")
        found.append(
            _source(name, filename, match["template"] or "", params_text, body, text, body_start)
        )
    return found


def _balanced(text: str, open_at: int, filename: str, name: str) -> tuple[str, int]:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i], i + 1
    raise KernelSourceError(f"{filename}: kernel {name}: unbalanced parameter list")


def _split_params(params_text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in params_text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current))
    return [" ".join(p.split()) for p in parts]


def _source(
    name: str, filename: str, template: str, params_text: str, body: str, text: str, at: int
) -> KernelSource:
    where = f"{filename}: kernel {name}"
    inputs: list[str] = []
    outputs: list[str] = []
    output_types: list[str] = []
    attributes: list[str] = []
    shape_params: list[str] = []
    atomic: list[bool] = []
    buffer_index = 0
    for param in _split_params(params_text):
        annotation = _ANNOTATION_RE.search(param)
        decl = _ANNOTATION_RE.sub("", param).strip()
        what = annotation["what"] if annotation else ""
        if what.startswith("buffer("):
            if what != f"buffer({buffer_index})":
                raise KernelSourceError(f"{where}: `{param}`: expected [[buffer({buffer_index})]]")
            buffer_index += 1
            if m := _INPUT_RE.match(decl):
                pname = m["name"]
                base = next(
                    (pname.removesuffix(s) for s in SHAPE_SUFFIXES if pname.endswith(s)), None
                )
                if base is not None and base in inputs:
                    shape_params.append(pname)
                elif outputs:
                    raise KernelSourceError(f"{where}: input {pname} after the outputs")
                else:
                    inputs.append(pname)
            elif m := _OUTPUT_RE.match(decl):
                outputs.append(m["name"])
                output_types.append(m["type"].strip())
                atomic.append("atomic" in m["type"])
            else:
                raise KernelSourceError(f"{where}: cannot read buffer parameter `{param}`")
        elif m := _ATTRIBUTE_RE.match(decl):
            attr = m["name"]
            if what != attr or METAL_ATTRIBUTES.get(attr) != m["type"]:
                raise KernelSourceError(
                    f"{where}: attribute `{param}`: declare it as MLX does: "
                    f"`{METAL_ATTRIBUTES.get(attr, 'uint')} {attr} [[{attr}]]`"
                )
            attributes.append(attr)
        else:
            raise KernelSourceError(f"{where}: cannot read parameter `{param}`")
    if not outputs:
        raise KernelSourceError(f"{where}: a kernel needs at least one output")
    if any(atomic) and not all(atomic):
        raise KernelSourceError(f"{where}: MLX makes all outputs atomic or none")
    for pname in inputs:
        for suffix in SHAPE_SUFFIXES:
            used = f"{pname}{suffix}" in body
            declared = f"{pname}{suffix}" in shape_params
            if used != declared:
                raise KernelSourceError(
                    f"{where}: the body {'uses' if used else 'does not use'} {pname}{suffix} "
                    f"but the signature {'does not declare' if used else 'declares'} it"
                )
    for attr in METAL_ATTRIBUTES:
        if attr in body:
            raise KernelSourceError(
                f"{where}: the body names the Metal attribute {attr}; use the dialect's macros"
            )
    needed = {attr for macro, attr in MACRO_ATTRIBUTES.items() if macro in body}
    if needed - set(attributes):
        raise KernelSourceError(
            f"{where}: the body needs attributes {sorted(needed - set(attributes))} "
            f"in the signature"
        )
    template_names = tuple(
        m.group(2) for m in re.finditer(r"(typename|int|bool)\s+(\w+)", template)
    )
    return KernelSource(
        name=name,
        file=filename,
        template=template_names,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        output_types=tuple(output_types),
        attributes=tuple(attributes),
        shape_params=tuple(shape_params),
        atomic_outputs=bool(atomic) and all(atomic),
        body=body,
        body_line=text.count("\n", 0, at) + 1,
    )
