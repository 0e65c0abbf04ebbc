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

if [ ! -d /usr/local/cuda/include ]; then
  echo "setup: error: /usr/local/cuda not found: the build compiles CUDA kernels (nvcc) and links the CUDA runtime, cuBLAS and NCCL even for CPU runs" >&2
  exit 1
fi
