#!/usr/bin/env bash
# One virtual environment per public MLX DFlash implementation, for `bench --suite`, and
# llama.cpp's llama-server and llama-bench built from source (the peer with DFlash2).
#
# Why separate environments: the three packages pin different MLX / mlx-lm versions and two
# of them install a console command named `dflash`, so they cannot share our venv (nor each
# other's). engine_mlx/bench/external.py runs a small runner script inside each one.
#
# Linux CPU notes:
# - plain `mlx` on Linux has no CPU backend; `mlx[cpu]` (the mlx-cpu wheel) provides it.
# - z-lab's `dflash` pins mlx/mlx-lm/huggingface-hub only for macOS (extra "local") and on
#   Linux pulls torch + transformers for its PyTorch backend, which the MLX runner never
#   imports. So it is installed with --no-deps and given the macOS pins of its MLX backend
#   (mlx 0.32.0, mlx-lm 0.31.3, huggingface-hub 1.27.0) and its tqdm/requests pins;
#   `datasets` (only for its own benchmark CLI, and heavy) is left out.
# - Fair speed: the runners preload Debian's OpenBLAS (apt-get install libopenblas0-pthread)
#   with RTLD_GLOBAL before importing mlx, exactly as engine_mlx/backend.py does, so fp32
#   matmuls use the same BLAS in every implementation. This script only checks it is there.
#
# Usage: scripts/setup_bench_envs.sh [DIR]   (default: .bench-envs/ in the repository)
# Idempotent: an environment whose recorded requirements match is left alone.
# PYTHON selects the interpreter (default python3; the packages need Python >= 3.10).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$repo/.bench-envs}"
python="${PYTHON:-python3}"
mkdir -p "$dir"

# name|pip arguments (one line per environment; "nodeps:" marks packages installed alone)
envs=(
  "zlab|mlx[cpu]==0.32.0 mlx-lm==0.31.3 huggingface-hub==1.27.0 tqdm==4.70.0 requests==2.34.2 numpy nodeps:dflash==0.1.0"
  "dflash-mlx|dflash-mlx==0.1.8 mlx[cpu] numpy"
  "mlx-dspark|mlx-dspark==0.20.3 mlx[cpu] numpy"
)

setup_env() {
  local name="$1" spec="$2" venv="$dir/$1"
  local stamp="$venv/.flashchat-requirements"
  if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$spec" ]]; then
    echo "[$name] up to date ($venv)"
    return
  fi
  echo "[$name] creating $venv"
  [[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  local plain=() alone=()
  for req in $spec; do
    if [[ "$req" == nodeps:* ]]; then alone+=("${req#nodeps:}"); else plain+=("$req"); fi
  done
  "$venv/bin/python" -m pip install --quiet "${plain[@]}"
  if ((${#alone[@]})); then
    "$venv/bin/python" -m pip install --quiet --no-deps "${alone[@]}"
  fi
  "$venv/bin/python" -c "import mlx.core as mx; mx.eval(mx.ones(2) + 1)"
  printf '%s' "$spec" >"$stamp"
  echo "[$name] ready"
}

for entry in "${envs[@]}"; do
  setup_env "${entry%%|*}" "${entry#*|}"
done

# llama.cpp (the peer with DFlash2): its own script, which `make test` runs too.
"$repo/scripts/build_llama_cpp.sh" "$dir/llama.cpp"

if ! "$python" -c "import ctypes, ctypes.util, sys; n = ctypes.util.find_library('openblas'); sys.exit(0 if n else 1)"; then
  echo "warning: OpenBLAS not found; runners will use MLX's slow bundled BLAS." >&2
  echo "         apt-get install libopenblas0-pthread" >&2
fi
echo "environments in $dir"
