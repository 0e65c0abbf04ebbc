#!/usr/bin/env bash
# Builds the fuzz targets (tools/fuzz/*_fuzzer.cc: libFuzzer + AddressSanitizer, which includes
# LeakSanitizer, + UndefinedBehaviorSanitizer with every report fatal) with Debian's clang 16
# (clang-16, libclang-rt-16-dev; older clangs reject lambdas capturing structured bindings, which
# GCC and our code accept), outside Bazel: Bazel's toolchain here is GCC, which has no libFuzzer.
# tools/fuzz/Makefile compiles each library source a target needs once, into OUT_DIR/obj (again
# only when it or a header it includes changed), and links Debian's yaml-cpp, ICU, libonnx and
# libprotobuf.
# Usage: tools/fuzz/build.sh [OUT_DIR] [TARGET...]   (default tmp/fuzz, git-ignored; every target)
# tools/fuzz/run.sh builds, makes the seed corpora and runs the fuzzers in one go.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-tmp/fuzz}
shift $(($# > 0 ? 1 : 0))
make --no-print-directory -f tools/fuzz/Makefile OUT="$out" CXX="${CXX:-clang++-16}" \
  -j"$(nproc)" "$@"
echo "built in $out: ${*:-every target}"
