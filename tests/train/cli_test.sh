#!/usr/bin/env bash
# merak_train's command line: bad input ends with exit 2 and one line naming the file and key;
# a short run prints its step lines, writes the metrics file and a summary.
set -u
train="$1"
configs="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }

printf 'model:\n  family: gpt\noptimizer:\n  lrr: 0.1\n' > "$tmp/bad.yaml"
out=$("$train" --config "$tmp/bad.yaml" 2>&1); rc=$?
[ "$rc" -eq 2 ] || fail "unknown key: exit $rc, want 2 ($out)"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "unknown key: more than one line: $out"
printf '%s' "$out" | grep -q "bad.yaml: key 'optimizer.lrr': unknown key" || fail "message: $out"

out=$("$train" --config "$configs/gpt-tiny.yaml" --set train.steps=ten 2>&1); rc=$?
[ "$rc" -eq 2 ] || fail "bad --set: exit $rc ($out)"
printf '%s' "$out" | grep -q "train.steps" || fail "bad --set message: $out"

out=$("$train" --config "$tmp/missing.yaml" 2>&1); rc=$?
[ "$rc" -eq 2 ] || fail "missing file: exit $rc ($out)"

out=$("$train" 2>&1); rc=$?
[ "$rc" -eq 2 ] || fail "no --config: exit $rc"

out=$("$train" --config "$configs/gpt-tiny.yaml" --set train.steps=12 --set train.log_interval=5 \
      --set model.layers=1 --metrics "$tmp/m.jsonl" 2>&1); rc=$?
[ "$rc" -eq 0 ] || fail "short run: exit $rc: $out"
[ "$(grep -c '^step ' <<< "$out")" -eq 4 ] || fail "want step lines 1, 5, 10, 12: $out"
grep -q '^done: 12 steps' <<< "$out" || fail "no summary: $out"
[ "$(wc -l < "$tmp/m.jsonl")" -eq 12 ] || fail "metrics: want 12 lines"
for key in step loss lr grad_norm tokens_per_s gflops peak_mem_bytes; do
  grep -q "\"$key\": " "$tmp/m.jsonl" || fail "metrics lack $key"
done
echo "cli_test: all checks passed"
