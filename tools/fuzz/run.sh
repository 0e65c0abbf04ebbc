#!/usr/bin/env bash
# The importer's fuzz run: builds the fuzzer, writes a fresh seed corpus of real exports, and
# runs RUNS executions (default 100000) from it. libFuzzer exits non-zero, leaving the input as
# tmp/fuzz/crash-* (or leak-*, timeout-*, oom-*), on any crash, sanitizer report, leak, input
# slower than 60 s or use of more than 2 GB.
# Usage: tools/fuzz/run.sh [RUNS] [more libFuzzer flags]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=tmp/fuzz
runs=${1:-100000}
shift $(($# > 0 ? 1 : 0))
tools/fuzz/build.sh "$out"
rm -rf "$out/seeds" "$out/corpus"
tools/fuzz/make_corpus.sh "$out/seeds"
mkdir -p "$out/corpus"
export ASAN_OPTIONS=detect_leaks=1
# Readable stack traces: ASan wants the symbolizer's real path, not Debian's symlink to it.
if sym=$(command -v llvm-symbolizer); then export ASAN_SYMBOLIZER_PATH=$(readlink -f "$sym"); fi
"$out/onnx_import_fuzzer" -runs="$runs" -timeout=60 -rss_limit_mb=2048 \
  -artifact_prefix="$out/" -print_final_stats=1 "$@" "$out/corpus" "$out/seeds"
