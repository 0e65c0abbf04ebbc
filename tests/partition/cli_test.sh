#!/usr/bin/env bash
# merak_partition's command line: the GPT-20B explain table and JSON report for 64 ranks
# (pp 8 x tp 8 on A100s, the partitioning time printed), byte-identical plans, the options, the
# calibration, and one-line exit-2 errors for bad input.
set -euo pipefail
tool="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

# Exit code 2 and exactly one line on stderr mentioning $2.
bad() {
  local want="$1"; shift
  set +e
  "$tool" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  set -e
  [[ $rc == 2 ]] || fail "$* exited $rc, wanted 2: $(cat "$tmp/err")"
  [[ $(wc -l <"$tmp/err") == 1 ]] || fail "$* printed more than one line: $(cat "$tmp/err")"
  grep -q -- "$want" "$tmp/err" || fail "$* said '$(cat "$tmp/err")', wanted '$want'"
  echo "exit 2 as expected: $(cat "$tmp/err")"
}

g20=(--config configs/gpt20b.yaml --pp 8 --tp 8 --dp 1 --hardware a100-80g)
"$tool" "${g20[@]}" --explain | tee "$tmp/explain"
grep -q "^stage  modules" "$tmp/explain" || fail "no stage table"
[[ $(grep -cE '^ +[0-7]  ' "$tmp/explain") == 8 ]] || fail "expected 8 stage rows"
grep -q "uniform layers (Megatron)" "$tmp/explain" || fail "no Megatron baseline"
grep -q "parameter-balanced (DeepSpeed)" "$tmp/explain" || fail "no DeepSpeed baseline"
grep -q "tied (shared by stages, gradients summed): wte.weight" "$tmp/explain" || fail "no tie"

"$tool" "${g20[@]}" --json >"$tmp/report.json"
/usr/bin/python3 - "$tmp/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["dp"] * r["pp"] * r["tp"] == 64, r
assert len(r["stages"]) == 8
i = r["imbalance"]
assert i["ours"] <= i["uniform_layers"] and i["ours"] <= i["parameter_balanced"], i
assert all(s["memory_bytes"] <= r["memory_limit_bytes"] for s in r["stages"])
print("imbalance: ours %.3f, uniform layers %.3f, parameter-balanced %.3f"
      % (i["ours"], i["uniform_layers"], i["parameter_balanced"]))
print("partitioning 64 ranks (trace + tp pass + split + plan) took %.3f s" % r["partition_seconds"])
PY

# Plans: the same inputs give the same bytes; a different layout does not.
# (Outputs go to files before grep -q: under pipefail, grep -q leaving early would fail the
# pipeline whenever the tool is still writing.)
"$tool" "${g20[@]}" -o "$tmp/a.pb" >"$tmp/a.out"
grep -q "wrote .* (64 rank programs)" "$tmp/a.out" || fail "no plan written"
"$tool" "${g20[@]}" -o "$tmp/b.pb" >/dev/null
cmp "$tmp/a.pb" "$tmp/b.pb" || fail "plans differ between identical runs"
"$tool" --config configs/gpt20b.yaml --pp 4 --tp 8 --dp 2 --hardware a100-80g -o "$tmp/c.pb" \
  >/dev/null
! cmp -s "$tmp/a.pb" "$tmp/c.pb" || fail "different layouts gave the same plan"

# Options.
"$tool" --config configs/gpt-tiny.yaml --pp 2 --dp 2 --hardware cpu-local --schedule gpipe \
  --zero1 --micro-batches 4 >"$tmp/tiny"
grep -q "gpipe, 4 micro-batches, ZeRO-1" "$tmp/tiny" || fail "options not shown: $(head -3 "$tmp/tiny")"
# An output it cannot write is found before the measuring (which takes a while), with why.
mkdir -p "$tmp/a-dir"
rc=0
out=$(timeout 10 "$tool" calibrate -o "$tmp/a-dir" 2>&1) || rc=$?
[ "$rc" -eq 2 ] && [ "$out" = "merak_partition: cannot write '$tmp/a-dir' (it is a directory)" ] ||
  fail "calibrate -o a directory: exit $rc: $out"
"$tool" calibrate -o "$tmp/cpu.yaml" >/dev/null
"$tool" --config configs/gpt-tiny.yaml --pp 2 --hardware "$tmp/cpu.yaml" >"$tmp/calibrated"
grep -q "ours (exact" "$tmp/calibrated" || fail "the calibrated profile does not load"
# A CPU profile calibrated on a CPU far faster than this one is warned of (twenty times: this
# machine's own profile is not compared, its calibration can run while other work loads the
# cores); a GPU's profile is never compared with the host.
awk '/^peak_tflops:/ { peak = 1 } peak && /^  f32:/ { printf "  f32: %.6f\n", $2 * 20; peak = 0; next }
     { print }' "$tmp/cpu.yaml" > "$tmp/cpu-fast.yaml"
"$tool" --config configs/gpt-tiny.yaml --hardware "$tmp/cpu-fast.yaml" >/dev/null 2>"$tmp/err" ||
  fail "the fast profile: $(cat "$tmp/err")"
ratio=$(sed -n "s/^merak_partition: warning: hardware profile '.*cpu-fast.yaml' was calibrated on a CPU of [0-9]* GFLOP\/s a core; this one measures [0-9]*, so its step-time predictions are off by about \([0-9.]*\)x.*/\1/p" "$tmp/err")
awk -v r="$ratio" 'BEGIN { exit !(r >= 5) }' ||
  fail "no warning for a profile of a CPU 20x as fast: $(cat "$tmp/err")"
"$tool" --config configs/gpt-tiny.yaml --hardware h100-80g >/dev/null 2>"$tmp/err"
grep -q "calibrated on" "$tmp/err" && fail "a GPU profile compared with the CPU: $(cat "$tmp/err")"
echo "a CPU profile of a faster CPU: predictions off by about ${ratio}x, warned"

# Bad input.
bad "no split into 1 pipeline stages fits in 71.8 GiB" --config configs/gpt20b.yaml --pp 1 --tp 1 --hardware a100-80g
bad "needs" --config configs/gpt20b.yaml --pp 1 --tp 1 --hardware a100-80g
# A flag that stands for a key is named as the user gave it (it had been '--set parallel.tp'),
# and --set as given too.
bad "^merak_partition: configs/gpt20b.yaml: --tp: model.heads 64 is not divisible by parallel.tp 3$" \
  --config configs/gpt20b.yaml --pp 8 --tp 3 --hardware a100-80g
bad "^merak_partition: configs/gpt20b.yaml: --set parallel.tp: model.heads 64 is not divisible" \
  --config configs/gpt20b.yaml --pp 8 --set parallel.tp=3 --hardware a100-80g
# A limit too small to show in GiB shows what it is (it had read 'fits in 0.0 GiB'), and so does
# what the model needs.
bad "pipeline stages fits in 1.074 B per device; the best split needs [0-9.]* MiB per device" \
  --config configs/gpt-tiny.yaml --memory-gib 1e-9
bad "--pp must be a positive integer" --config configs/gpt-tiny.yaml --pp 0 --hardware a100-80g
bad "hardware profile 'tpu-v9' not found" --config configs/gpt-tiny.yaml --hardware tpu-v9
bad "--hardware NAME is required with --onnx" --onnx no/such.onnx
bad "cannot read config file" --config no/such.yaml --hardware a100-80g
# A directory where a file goes says so (not a parser's complaint about what it read).
bad "cannot read hardware profile (Is a directory)" --config configs/gpt-tiny.yaml --hardware "$tmp"
bad "cannot read (Is a directory)" --onnx "$tmp" --hardware a100-80g
bad "give one of --config FILE.yaml or --onnx FILE.onnx" --hardware a100-80g
bad "unknown option '--pipeline'" --config configs/gpt-tiny.yaml --pipeline 2 --hardware a100-80g
# (Flags stand for config keys: their values are checked as the config's.)
bad "configs/gpt-tiny.yaml: --schedule: must be one of gpipe, 1f1b, shifted, interleaved, zb, got 'pipedream'" \
  --config configs/gpt-tiny.yaml --schedule pipedream --hardware a100-80g
bad "3 micro-batches do not divide the 16 sequences" --config configs/gpt-tiny.yaml \
  --micro-batches 3 --hardware a100-80g
bad "too few for" --config configs/gpt-tiny.yaml --pp 1000 --hardware a100-80g
bad "no/such.onnx" --onnx no/such.onnx --hardware a100-80g
echo "all checks passed"
