#!/usr/bin/env bash
# merak_train's command line: bad input ends with exit 2 and one line naming the file and key;
# a short run prints its step lines, writes the metrics file, a Chrome trace and a summary; the
# job's size comes from mpirun, PMI, PMIx or a Slurm step; the dry run explains exactly the plan
# merak_partition explains, for every config.
set -u
train="$1"
partition="$2"
configs="$3"
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
# An empty value (a variable that expanded to nothing) and a flag given twice are refused.
for args in "--resume|" "--metrics|" "--dry-run|--dry-run" "--json|--json"; do
  IFS='|' read -r first second <<< "$args"
  out=$("$train" --config "$configs/gpt-tiny.yaml" --set train.steps=1 "$first" "$second" 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] && grep -Eq "^merak_train: $first (needs a value, got ''|given more than once)$" \
    <<< "$out" || fail "$first '$second': exit $rc: $out"
done
# MERAK_NUM_THREADS is held to train.threads's range (1 to 1024): another value is refused by
# name, by merak_train and by the tools parsing through tools/common/cli, before any work (it had
# been ignored, or read as 1e9 -> 1; 1025 and up made that many threads).
for v in abc 0 -3 1e9 1025 ""; do
  want="MERAK_NUM_THREADS must be a whole number of threads from 1 to 1024, got '$v'"
  out=$(MERAK_NUM_THREADS="$v" "$train" --config "$configs/gpt-tiny.yaml" --set train.steps=1 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] && [ "$out" = "merak_train: $want" ] || fail "MERAK_NUM_THREADS='$v': exit $rc: $out"
  out=$(MERAK_NUM_THREADS="$v" "$partition" --config "$configs/gpt-tiny.yaml" 2>&1); rc=$?
  [ "$rc" -eq 2 ] && [ "$out" = "merak_partition: $want" ] ||
    fail "merak_partition, MERAK_NUM_THREADS='$v': exit $rc: $out"
done
# Asked for, the usage is an answer: stdout, exit 0, as the other tools do.
out=$("$train" --help 2>/dev/null); rc=$?
[ "$rc" -eq 0 ] && grep -q "^usage: \[mpirun -np N\] merak_train --config FILE.yaml" <<< "$out" ||
  fail "--help: exit $rc: $out"
# The shell leaves checkpoint.dir="" as checkpoint.dir=: no checkpoints, as README says.
out=$("$train" --config "$configs/gpt-tiny.yaml" --set train.steps=1 --set model.layers=1 \
      --set checkpoint.dir="$tmp/ck-none" --set checkpoint.dir="" 2>&1); rc=$?
[ "$rc" -eq 0 ] && ! grep -qi "checkpoint" <<< "$out" && [ ! -e "$tmp/ck-none" ] ||
  fail "checkpoint.dir=\"\": exit $rc: $out"

out=$("$train" --config "$configs/gpt-tiny.yaml" --set train.steps=12 --set train.log_interval=5 \
      --set model.layers=1 --metrics "$tmp/m.jsonl" 2>&1); rc=$?
[ "$rc" -eq 0 ] || fail "short run: exit $rc: $out"
[ "$(grep -c '^step ' <<< "$out")" -eq 4 ] || fail "want step lines 1, 5, 10, 12: $out"
grep -q '^done: 12 steps' <<< "$out" || fail "no summary: $out"
grep -Eq "^peak host memory per rank, measured \(partitioner's estimate\): rank 0 [0-9.]+ MiB \([0-9.]+ MiB, x[0-9.]+\)$" \
  <<< "$out" || fail "no memory line with the estimate: $out"
[ "$(wc -l < "$tmp/m.jsonl")" -eq 12 ] || fail "metrics: want 12 lines"
for key in step loss lr grad_norm tokens_per_s gflops peak_mem_bytes; do
  grep -q "\"$key\": " "$tmp/m.jsonl" || fail "metrics lack $key"
done
# One process is the (1, 1, 1) layout of the engine: the trace works there too.
out=$("$train" --config "$configs/gpt-tiny.yaml" --set train.steps=3 --set model.layers=1 \
      --set train.micro_batch=4 --trace "$tmp/t.json" 2>&1); rc=$?
[ "$rc" -eq 0 ] || fail "traced run: exit $rc: $out"
grep -q "dp 1, pp 1, tp 1 on 1 rank$" <<< "$out" || fail "traced run: no layout: $out"
grep -q "^trace: $tmp/t.json (.* spans from 1 rank)" <<< "$out" || fail "no trace line: $out"
# 3 steps x 4 micro-batches of forward spans on the one track.
[ "$(grep -c '"name": "F[0-9]*", "cat": "compute"' "$tmp/t.json")" -eq 12 ] ||
  fail "trace: want 12 forward spans: $(grep -c '"name": "F' "$tmp/t.json")"

# A GPU asked for where there is none: exit 2, one line with the runtime's reason.
out=$("$train" --config "$configs/gpt-tiny.yaml" --set train.device=cuda 2>&1); rc=$?
if [ "$rc" -eq 2 ]; then
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "no GPU: more than one line: $out"
  grep -q "key 'train.device': cuda, but no CUDA device was found (" <<< "$out" ||
    fail "no GPU: message: $out"
else
  # A machine with a GPU trains on it.
  [ "$rc" -eq 0 ] && grep -q "cuda:0" <<< "$out" || fail "train.device cuda: exit $rc: $out"
fi

# Under srun (a Slurm job step, perhaps with PMIx) the job's size and rank come from Slurm's
# variables: a one-rank config started as 2 tasks refuses, once, naming both launchers.
slurm=(env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u PMI_SIZE -u PMI_RANK
       SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_NTASKS=2)
out=$("${slurm[@]}" SLURM_PROCID=0 "$train" --config "$configs/gpt-tiny.yaml" 2>&1); rc=$?
[ "$rc" -eq 2 ] || fail "srun, 2 tasks: exit $rc, want 2 ($out)"
grep -q "key 'parallel': dp 1 x pp 1 x tp 1 needs 1 rank, but the job has 2 (start it with no \
launcher, mpirun -np 1 or srun -n 1)" <<< "$out" || fail "srun, 2 tasks: message: $out"
out=$("${slurm[@]}" SLURM_PROCID=1 PMIX_RANK=1 "$train" --config "$configs/gpt-tiny.yaml" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && [ -z "$out" ] || fail "srun, task 1: exit $rc, want 2 and silence ($out)"
# A batch script's shell has SLURM_NTASKS but is no step: merak_train there is one process.
out=$(env SLURM_JOB_ID=7 SLURM_NTASKS=2 SLURM_PROCID=0 "$train" --config "$configs/gpt-tiny.yaml" \
      --set train.steps=1 --set model.layers=1 2>&1); rc=$?
[ "$rc" -eq 0 ] && grep -q "on 1 rank$" <<< "$out" || fail "sbatch shell: exit $rc: $out"

# The old recomputation key says where it went.
out=$("$train" --config "$configs/gpt-tiny.yaml" --set model.recompute=true 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "model.recompute: no longer a model key.*parallel.recompute" \
  <<< "$out" || fail "model.recompute: exit $rc: $out"

# The plan explained is the plan that runs: merak_train --dry-run and merak_partition build the
# same request from every config (the JSON reports equal but for the time partitioning took).
# A config that leaves its layout to the search is planned for 64 ranks (512 when 64 cannot hold
# it), and merak_partition given the layout the search chose must explain the same plan.
strip() { sed -E 's/"partition_seconds": [0-9.e+-]+//' "$1"; }
same_plan() {  # same_plan A.json B.json: equal but for timing and the search's own members
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for d in (a, b):
    for k in ("partition_seconds", "search", "layout", "predicted"):
        d.pop(k, None)
sys.exit(0 if a == b else 1)
PY
}
for cfg in "$configs"/*.yaml; do
  sets=()
  if grep -q ': auto$' "$cfg"; then
    # 64 ranks, or 512 for a model that 64 devices cannot hold (the 1T-parameter GPT).
    for world in 64 512; do
      "$train" --config "$cfg" --dry-run --json --world $world > "$tmp/train.json" 2> "$tmp/train.err"
      a=$?
      grep -q "no layout of $world ranks fits" "$tmp/train.err" || break
    done
    [ "$a" -eq 0 ] || fail "$cfg: the layout search at $world ranks: $(cat "$tmp/train.err")"
    read -r -a sets < <(/usr/bin/python3 -c '
import json, sys
l = json.load(open(sys.argv[1]))["layout"]
print(" ".join("--set parallel.%s=%s" % (k, str(l[k]).lower())
               for k in ("dp", "pp", "tp", "schedule", "virtual_stages", "recompute", "zero1")),
      "--set train.micro_batch=%d" % l["micro_batch"])' "$tmp/train.json")
  else
    "$train" --config "$cfg" --dry-run --json > "$tmp/train.json" 2> "$tmp/train.err"; a=$?
  fi
  "$partition" --config "$cfg" "${sets[@]}" --json > "$tmp/part.json" 2> "$tmp/part.err"; b=$?
  [ "$a" -eq "$b" ] || fail "$cfg: merak_train --dry-run exit $a, merak_partition $b: $(cat "$tmp/train.err" "$tmp/part.err")"
  if [ "$a" -eq 0 ]; then
    same_plan "$tmp/train.json" "$tmp/part.json" ||
      fail "$cfg: the plans differ: $(diff <(strip "$tmp/train.json") <(strip "$tmp/part.json") | head -20)"
    grep -q '"stages"' "$tmp/train.json" || fail "$cfg: no stages in the dry run"
    echo "same plan: $cfg ${sets[*]}"
  else
    # The same one-line reason, each under its tool's name.
    [ "$(sed 's/^merak_train: //' "$tmp/train.err")" = "$(sed 's/^merak_partition: //' "$tmp/part.err")" ] ||
      fail "$cfg: different errors: $(cat "$tmp/train.err" "$tmp/part.err")"
    echo "same refusal: $cfg: $(cat "$tmp/train.err")"
  fi
done

"$partition" --config "$configs/gpt-tiny-3d.yaml" --pp 4 --tp 1 --dp 1 --schedule gpipe --json \
  > "$tmp/flags.json" || fail "merak_partition with flags"
"$train" --config "$configs/gpt-tiny-3d.yaml" --set parallel.pp=4 --set parallel.tp=1 \
  --set parallel.dp=1 --set parallel.schedule=gpipe --dry-run --json > "$tmp/keys.json" ||
  fail "merak_train --dry-run with keys"
same_plan "$tmp/flags.json" "$tmp/keys.json" ||
  fail "flags and keys differ: $(diff <(strip "$tmp/flags.json") <(strip "$tmp/keys.json") | head -20)"
# --log-level: messages (the header, here) are filtered by level, the step lines stay; a debug
# message of another rank carries its rank; an unknown level is refused.
"$train" --config "$configs/gpt-tiny.yaml" --set train.steps=2 --log-level warn \
  > "$tmp/quiet.log" 2>&1 || fail "--log-level warn: $(tail -3 "$tmp/quiet.log")"
grep -q '^step     2/2 | loss' "$tmp/quiet.log" || fail "--log-level warn lost the step line"
! grep -q '^merak_train: configs' "$tmp/quiet.log" || fail "--log-level warn kept the header"
OMPI_MCA_btl=self,vader timeout $((120 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np 2 "$train" \
  --config "$configs/gpt-tiny.yaml" --set train.steps=1 --set parallel.pp=2 --log-level debug \
  > "$tmp/debug.log" 2>&1 || fail "--log-level debug at pp 2: $(tail -3 "$tmp/debug.log")"
grep -q '^\[rank 1\] place: dp 0, pp 1, tp 0' "$tmp/debug.log" ||
  fail "no rank-prefixed debug message: $(head -5 "$tmp/debug.log")"
grep -q '^place: dp 0, pp 0, tp 0' "$tmp/debug.log" || fail "no rank 0 debug message"
"$train" --config "$configs/gpt-tiny.yaml" --log-level loud > "$tmp/bad.log" 2>&1
[ $? -eq 2 ] && grep -q "unknown log level 'loud'" "$tmp/bad.log" ||
  fail "--log-level loud: $(cat "$tmp/bad.log")"
echo "log levels: warn hides messages, debug shows every rank's with its rank"

echo "cli_test: all checks passed"
