#!/usr/bin/env bash
# Installs what is missing, builds and runs every test, then smokes every fuzz target (the
# README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
flags=()
if [ -n "${CI:-}" ] || [ ! -t 1 ]; then flags+=(--config=ci); fi
log=$(mktemp)
status=0
bazel test "${flags[@]}" //... 2>&1 | tee "$log" || status=$?
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log" || true)
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log" || true)
# A GPU target (tag "gpu") that found no GPU ran only its host checks and says "SKIPPED (no GPU"
# in its log: it counts as skipped, never as passed.
skipped=0
for target in $(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2> /dev/null); do
  grep -qE "^${target} +(\(cached\) )?PASSED" "$log" || continue
  test_log="bazel-testlogs/${target#//}"
  test_log="${test_log/://}/test.log"
  if grep -q "SKIPPED (no GPU" "$test_log" 2> /dev/null; then
    skipped=$((skipped + 1))
    echo "skipped (no GPU): ${target}"
  fi
done
passed=$((passed - skipped))
# The loaders' fuzz targets (tools/fuzz: clang, libFuzzer, ASan, UBSan, outside Bazel): a smoke
# of 3000 executions each from fresh seeds, counted as one test.
mkdir -p tmp
if timeout 1800 tools/fuzz/run.sh all 3000 > tmp/fuzz-smoke.log 2>&1; then
  passed=$((passed + 1))
  echo "fuzz smoke: PASSED"; tail -n 6 tmp/fuzz-smoke.log
else
  failed=$((failed + 1))
  status=1
  echo "fuzz smoke: FAILED"; tail -n 60 tmp/fuzz-smoke.log
fi
if [ -n "${CI:-}" ]; then bazel shutdown; fi
rm -f "$log"
echo "tests: ${passed} passed, ${failed} failed, ${skipped} skipped"
exit $status
