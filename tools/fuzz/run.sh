#!/usr/bin/env bash
# Fuzz runs: builds the targets, writes fresh seed corpora of real files (make_corpus.sh) and
# runs each target RUNS executions (default 100000) from its seeds, one target after another.
# Prints one line per target: executions, crashes, executions per second, seconds. libFuzzer
# stops a target at its first finding (a crash, sanitizer report, leak, input slower than 60 s
# or use of more than 2 GB), leaving the input as tmp/fuzz/TARGET-crash-* (or -leak-,
# -timeout-, -oom-) and its log as tmp/fuzz/TARGET.log; the script then goes on with the other
# targets and exits non-zero at the end.
# Usage: tools/fuzz/run.sh [all|TARGET] [RUNS] [more libFuzzer flags]
#        tools/fuzz/run.sh [RUNS] [more libFuzzer flags]                 (all targets)
# TARGET: config, checkpoint, tokens, gpt2_tokenizer or onnx_import (a _fuzzer suffix is fine).
# FUZZ_JOBS=N runs N processes of each target at once (RUNS/N executions each, one shared
# corpus, logs TARGET.log, TARGET.2.log, ...); the executions reported are their sum.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=tmp/fuzz
all=(config checkpoint tokens gpt2_tokenizer onnx_import)
which=all
if [ $# -gt 0 ] && ! [[ $1 =~ ^[0-9]+$ ]]; then which=$1; shift; fi
runs=${1:-100000}
jobs=${FUZZ_JOBS:-1}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: FUZZ_JOBS must be a positive count" >&2; exit 2; }
shift $(($# > 0 ? 1 : 0))
if [ "$which" = all ]; then names=("${all[@]}"); else names=("${which%_fuzzer}"); fi
targets=()
for n in "${names[@]}"; do
  [[ " ${all[*]} " == *" $n "* ]] || { echo "run.sh: no target '$n' (${all[*]})" >&2; exit 2; }
  targets+=("${n}_fuzzer")
done

tools/fuzz/build.sh "$out" "${targets[@]}"
for t in "${targets[@]}"; do rm -rf "$out/seeds/$t" "$out/corpus/$t"; done
tools/fuzz/make_corpus.sh "$out/seeds" "${targets[@]}"
# Allocation and free stacks of 4 frames, not 30: ASan records one for every allocation, and
# with the importer's many small ones the deeper stacks cost a third of each run (a report's
# own stack stays whole; rerun a finding with the default to see more of where it was allocated).
export ASAN_OPTIONS=detect_leaks=1:malloc_context_size=4
export UBSAN_OPTIONS=print_stacktrace=1
# Readable stack traces: the sanitizers want the symbolizer's real path, not Debian's symlink.
if sym=$(command -v llvm-symbolizer); then export ASAN_SYMBOLIZER_PATH=$(readlink -f "$sym"); fi

failed=0
lines=()
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus/$t"
  # Each seed whole (fuzzing may cut the largest ones to -max_len), once.
  seed_failed=0
  if ! "$out/$t" "$out/seeds/$t"/* > "$out/$t.seeds.log" 2>&1; then
    echo "$t: a seed fails, see $out/$t.seeds.log" >&2
    seed_failed=1
    failed=1
  fi
  # The full GPT-2 files (1.5 MB) would make every mutation of them slow: fuzz up to 64 KB (the
  # small pairs) and their cut prefixes.
  limit=()
  [ "$t" != gpt2_tokenizer_fuzzer ] || limit=(-max_len=65536)
  before=$(ls "$out" | grep -c "^$t-" || true)
  start=$(date +%s.%N)
  logs=() pids=()
  for ((j = 1; j <= jobs; ++j)); do
    log="$out/$t.log"
    [ $j -eq 1 ] || log="$out/$t.$j.log"
    logs+=("$log")
    "$out/$t" -runs=$(((runs + jobs - 1) / jobs)) -timeout=60 -rss_limit_mb=2048 \
      -dict=tools/fuzz/split.dict -artifact_prefix="$out/$t-" -print_final_stats=1 \
      "${limit[@]}" "$@" "$out/corpus/$t" "$out/seeds/$t" > "$log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  found=$(( $(ls "$out" | grep -c "^$t-" || true) - before + seed_failed ))
  # Every process's executions, summed; a process that left no statistics leaves the sum unknown.
  execs=0
  for log in "${logs[@]}"; do
    n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    [ -n "$n" ] && [ "$execs" != "?" ] && execs=$((execs + n)) || execs="?"
  done
  rate=$(awk -v n="$execs" -v s="$secs" 'BEGIN { if (n == "?") print "?"; else printf "%d", n / s }')
  # A run stopped by a signal (Ctrl-C) is unfinished, not a finding; any other failure without
  # an artifact still counts as one.
  interrupted=0
  for log in "${logs[@]}"; do grep -q "libFuzzer: run interrupted" "$log" && interrupted=1; done
  if [ $rc -ne 0 ] && [ $found -eq 0 ] && [ $interrupted -eq 0 ]; then found=1; fi
  [ $interrupted -eq 0 ] || echo "$t: interrupted after $execs of $runs executions" >&2
  if [ $rc -ne 0 ]; then
    failed=1
    [ $interrupted -eq 1 ] || for log in "${logs[@]}"; do tail -n 40 "$log"; done
  fi
  lines+=("$(printf '%-24s %12s %8s %8s %9.1f' "$t" "${execs:-?}" "$found" "${rate:-?}" "$secs")")
done
printf '%-24s %12s %8s %8s %9s\n' target executions crashes exec/s seconds
printf '%s\n' "${lines[@]}"
if [ $failed -ne 0 ]; then
  echo "findings: $(ls -d "$out"/*_fuzzer-* 2>/dev/null | tr '\n' ' ')" >&2
  exit 1
fi
