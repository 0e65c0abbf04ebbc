#!/usr/bin/env bash
# Installs what is missing, then builds and runs every test (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
flags=()
if [ -n "${CI:-}" ] || [ ! -t 1 ]; then flags+=(--config=ci); fi
log=$(mktemp)
status=0
bazel test "${flags[@]}" //... 2>&1 | tee "$log" || status=$?
if [ -n "${CI:-}" ]; then bazel shutdown; fi
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log" || true)
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log" || true)
rm -f "$log"
echo "tests: ${passed} passed, ${failed} failed"
exit $status
