#!/usr/bin/env bash
# The layout search and dry run at their edges: a 16-bit job's search never picks ZeRO-1 (the
# engine has none for 16-bit replicas); an interleaved rank's chunks fit the device together; a
# fixed pp above the layer count plans as the run does; a graph tp cannot split is refused with
# the pass's reason; huge worlds, batches and --pp end at once with a reason; an interleaved
# dry run describes its real pp and schedule and shows the search's prediction; merak_partition
# says which auto keys it planned with placeholders.
set -u
train="$1"
partition="$2"
configs="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
tiny=(--config "$configs/gpt-tiny.yaml")

# run WANT_RC PATTERN ARGS...: merak_train's exit code and a line of its output.
run() {
  local rc="$1" want="$2"; shift 2
  out=$(timeout 60 "$train" "$@" 2>&1); got=$?
  [ "$got" -eq "$rc" ] && grep -q -- "$want" <<< "$out" ||
    fail "want exit $rc and '$want', got exit $got: $out"
}

# bf16 GPT-20B on 64 A100s: the search's choice has no ZeRO-1.
run 0 "^chosen: " --config "$configs/gpt20b.yaml" --dry-run --world 64 --gpus-per-node 8
grep "^chosen: " <<< "$out" | grep -q zero1 && fail "a bf16 job chose ZeRO-1: $out"
echo "gpt20b at 64: $(grep '^chosen: ' <<< "$out")"

# 2 ranks of a 0.12 GiB profile: each stage of the interleaved split fits alone, but rank 0
# holds stages 0 and 2, which do not fit together.
sed 's/^memory_gib: .*/memory_gib: 0.12/' "$configs/hardware/cpu-local.yaml" > "$tmp/tight.yaml"
small=("${tiny[@]}" --set model.hidden=256 --set model.layers=8 --set train.batch=32
       --set train.micro_batch=2 --set parallel.pp=2 --set parallel.hardware="$tmp/tight.yaml")
run 2 "no layout of 2 ranks fits" "${small[@]}" --set parallel.schedule=interleaved \
  --set parallel.virtual_stages=2 --dry-run

# Interleaved on the full device: the real pp, the schedule, the search's prediction.
run 0 "^layout dp 1 x pp 2 x tp 1 = 2 ranks .* interleaved x2, 4 micro-batches" "${tiny[@]}" \
  --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 \
  --set train.micro_batch=4 --dry-run
step=$(sed -n 's/^ *1 *\([0-9.]*\) .*interleaved x2.*/\1/p' <<< "$out")
grep -q "^predicted step: $step s (the layout search's" <<< "$out" ||
  fail "the dry run's predicted step is not the search's $step: $out"

# A fixed pp above the 4 layers: the partitioner cuts inside blocks, as the run does.
run 0 "^chosen: dp 1, pp 5, tp 1" "${tiny[@]}" --set parallel.pp=5 --dry-run --world 5
# Also with virtual_stages auto under a schedule that has none (gpt20b at pp 48 of 44 layers).
run 0 "^chosen: dp 1, pp 5, tp 1, .*1f1b" "${tiny[@]}" --set parallel.pp=5 \
  --set parallel.schedule=1f1b --set parallel.virtual_stages=auto --dry-run --world 5

# tp 2 cannot split an FFN of 3: the tensor-parallel pass's reason, not a memory figure.
run 2 "can split the model: .*into 3 features, not divisible by 2" "${tiny[@]}" \
  --set model.ffn_hidden=3 --set parallel.tp=2 --dry-run
grep -q "try about 0 ranks" <<< "$out" && fail "a memory figure for a split refusal: $out"

# Sizes far beyond any job end at once (timeout 60 above) with the bound.
run 2 "the layout search plans up to 1048576 ranks" --config "$configs/gpt20b.yaml" --dry-run \
  --world 100000000000
run 2 "at most 65536 micro-batches a replica" "${tiny[@]}" --set train.batch=16777216 \
  --set train.micro_batch=auto --dry-run
run 2 "train.batch: must be <= 16777216" "${tiny[@]}" --set train.batch=100000000000 --dry-run
out=$(timeout 60 "$partition" "${tiny[@]}" --pp 99999999999 2>&1); got=$?
[ "$got" -eq 2 ] && grep -q "too few for pp 99999999999" <<< "$out" ||
  fail "merak_partition --pp 99999999999: exit $got: $out"

# merak_partition plans one layout: it names the auto keys and the values it assumed.
out=$("$partition" --config "$configs/gpt20b.yaml" --pp 8 --tp 8 --dp 1 2>&1 >/dev/null) ||
  fail "merak_partition on gpt20b: $out"
grep -q "^merak_partition: note: .*leaves keys to auto, planned here as parallel.schedule 1f1b" \
  <<< "$out" || fail "no note of the auto keys: $out"
echo "layout_limits_test: all checks passed"
