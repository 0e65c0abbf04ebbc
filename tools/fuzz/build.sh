#!/usr/bin/env bash
# Builds tools/fuzz/onnx_import_fuzzer (libFuzzer + AddressSanitizer, which includes
# LeakSanitizer) with Debian's clang 16 (clang-16, libclang-rt-16-dev; older clangs reject
# lambdas capturing structured bindings, which GCC and our code accept), outside Bazel: Bazel's
# toolchain here is GCC, which has no libFuzzer. Compiles what the importer needs (core, op
# registry and definitions, the graph proto, the importer) from source with the sanitizer;
# links Debian's libonnx and libprotobuf.
# Usage: tools/fuzz/build.sh [OUT_DIR]      (default tmp/fuzz, git-ignored)
# tools/fuzz/run.sh builds, makes the seed corpus and runs the fuzzer in one go.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-tmp/fuzz}
cxx=${CXX:-clang++-16}
rm -rf "$out/obj"  # no stale objects from sources since renamed or removed
mkdir -p "$out/gen" "$out/obj"

protoc --cpp_out="$out/gen" merak/graph/graph.proto
flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,fuzzer-no-link
       -Wno-c++20-extensions -DONNX_ML=1 -DONNX_NAMESPACE=onnx -I. -I"$out/gen")
sources=(merak/core/*.cc merak/ops/*.cc merak/ops/defs/*.cc merak/graph/convert.cc
         merak/graph/onnx_*.cc "$out/gen/merak/graph/graph.pb.cc")

# One object per source, in parallel; each named after its path so equal basenames differ.
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  'o="$0/obj/$(echo "$1" | tr / _).o"; '"$cxx"' '"${flags[*]}"' -c "$1" -o "$o"' "$out" {}
"$cxx" "${flags[@]}" -fsanitize=address,fuzzer tools/fuzz/onnx_import_fuzzer.cc "$out"/obj/*.o \
  -lonnx -lonnx_proto -lprotobuf -lpthread -o "$out/onnx_import_fuzzer"
echo "built $out/onnx_import_fuzzer"
