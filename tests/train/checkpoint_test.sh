#!/usr/bin/env bash
# Checkpoints through merak_train:
#   - same-layout resume is bit for bit the uninterrupted run (loss and gradient norm printed at
#     full precision) for (1,1,1), (2,2,2) shifted with recomputation, (1,2,1) interleaved, dp 2
#     with ZeRO-1, BERT at (1,2,2), and a background (checkpoint.async) save at dp 2;
#   - resume in another layout: 20 steps within 1e-5 relative of the uninterrupted run, for
#     (2,2,2) -> (1,1,1), (1,1,1) -> (1,2,2), (1,4,1) -> (2,1,2), (2,1,1) ZeRO-1 -> (1,2,1) 1f1b,
#     (1,2,1) interleaved v2 -> (1,1,2);
#   - bad input ends every rank with exit 2 and one line: a bit-flipped or truncated file (naming
#     file and tensor), another model's checkpoint (naming the changed keys and both values; where the index's
#     config does not tell, the tensor and both shapes), a path
#     with no checkpoint, an unwritable checkpoint.dir, a disk that fills up during a save (in
#     the step loop or in the background), which leaves `latest` where it was, a scalar of the
#     state that is not a number (naming the file and the key);
#   - a resume with the data's keys changed (train.batch, data.seed) warns, naming each; so
#     does one whose learning-rate schedule changed (train.steps under cosine decay).
set -u
train="$1"
configs="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
export OMPI_MCA_btl=self,vader
export OMPI_MCA_mpi_yield_when_idle=1
export MERAK_NUM_THREADS=1
small=(--set model.layers=4 --set train.seq_len=32 --set train.log_interval=100)

source "$(dirname "$0")/layout_runs.sh"
# run NAME LAYOUT CONFIG ARGS...: run_layout with configs/CONFIG, made small.
run() {
  local name="$1" layout="$2" cfg="$3"; shift 3
  run_layout "$name" "$layout" --config "$configs/$cfg" "${small[@]}" "$@"
}

# Same layout: 6 steps saving at 3, then 3..6 again from the checkpoint.
same() {  # name layout config args...
  local name="$1" layout="$2" cfg="$3"; shift 3
  rm -rf "$tmp/ck-$name"
  run "$name-a" "$layout" "$cfg" --set train.steps=6 --set checkpoint.dir="$tmp/ck-$name" \
    --set checkpoint.every=3 "$@"
  # (It saves too, elsewhere: a resumed run's checkpoints work like any other's.)
  run "$name-b" "$layout" "$cfg" --set train.steps=6 --resume "$tmp/ck-$name/step_000000003" \
    --set checkpoint.dir="$tmp/ck-$name-b" "$@"
  grep -q "resumed from .*step_000000003: step 3 done" "$tmp/$name-b.log" ||
    fail "$name: no resume line: $(head -5 "$tmp/$name-b.log")"
  diff <(numbers "$tmp/$name-a.jsonl" 4) <(numbers "$tmp/$name-b.jsonl" 4) > "$tmp/diff" ||
    fail "$name: the resumed steps differ: $(cat "$tmp/diff")"
  [ "$(numbers "$tmp/$name-b.jsonl" 4 | wc -l)" -eq 3 ] || fail "$name: want steps 4..6"
  echo "bit-exact resume: $name ($layout): $(numbers "$tmp/$name-b.jsonl" 6)"
}
same one 1,1,1 gpt-tiny.yaml
same 3d-shifted 2,2,2 gpt-tiny.yaml --set parallel.schedule=shifted --set parallel.recompute=full \
  --set train.micro_batch=2
same interleaved 1,2,1 gpt-tiny.yaml --set parallel.schedule=interleaved \
  --set parallel.virtual_stages=2 --set train.micro_batch=2
same zero1 2,1,1 gpt-tiny.yaml --set parallel.zero1=true --set parallel.dp_shared_params=false
same bert 1,2,2 bert-tiny.yaml --set train.micro_batch=4
# Background saves: published a step later, the same state.
same async 2,1,1 gpt-tiny.yaml --set checkpoint.async=true
grep -q "^checkpoint: .*step_000000003 (.*the steps waited" "$tmp/async-a.log" ||
  fail "async: no report of the background save: $(cat "$tmp/async-a.log")"

# Another layout: 3 steps in the first, then 20 more in the second, against 23 uninterrupted.
reshard() {  # name from-layout from-args to-layout to-args (args as one string each)
  local name="$1" from="$2" from_args="$3" to="$4" to_args="$5"
  rm -rf "$tmp/ck-$name"
  # shellcheck disable=SC2086
  run "$name-ref" "$from" gpt-tiny.yaml --set train.steps=23 $from_args
  # shellcheck disable=SC2086
  run "$name-save" "$from" gpt-tiny.yaml --set train.steps=3 --set checkpoint.dir="$tmp/ck-$name" \
    $from_args
  # shellcheck disable=SC2086
  run "$name-resumed" "$to" gpt-tiny.yaml --set train.steps=23 --resume "$tmp/ck-$name" $to_args
  local worst
  worst=$(paste <(numbers "$tmp/$name-ref.jsonl" 4) <(numbers "$tmp/$name-resumed.jsonl" 4) | awk '
    $1 != $4 {print "step mismatch"; exit}
    {d = ($2 - $5) / $2; if (d < 0) d = -d; if (d > w) w = d; n++}
    END {if (n != 20) print "missing"; else printf "%.2e", w}')
  case "$worst" in missing|"step mismatch") fail "$name: $worst" ;; esac
  awk -v w="$worst" 'BEGIN {exit !(w > 1e-5)}' && fail "$name: loss off by $worst"
  echo "resume in another layout: $name: ($from) -> ($to), 20 steps, largest loss difference $worst"
}
reshard 3d-to-one 2,2,2 "--set train.micro_batch=2" 1,1,1 ""
reshard one-to-pp-tp 1,1,1 "" 1,2,2 "--set train.micro_batch=2"
reshard pp4-to-dp-tp 1,4,1 "--set train.micro_batch=2" 2,1,2 ""
reshard zero1-to-pp 2,1,1 "--set parallel.zero1=true --set parallel.dp_shared_params=false" 1,2,1 \
  "--set parallel.schedule=1f1b --set train.micro_batch=2"
reshard interleaved-to-tp 1,2,1 \
  "--set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.micro_batch=2" \
  1,1,2 ""

# Bad input: exit 2, one line, every rank stopped.
bad() {  # name want-in-message layout args...
  local name="$1" want="$2" layout="$3"; shift 3
  local d p t
  IFS=, read -r d p t <<< "$layout"
  local n=$((d * p * t)) launch=()
  [ "$n" -gt 1 ] && launch=(timeout $((120 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np "$n")
  local out rc
  out=$("${launch[@]}" "$train" --config "$configs/gpt-tiny.yaml" "${small[@]}" \
        --set parallel.dp="$d" --set parallel.pp="$p" --set parallel.tp="$t" \
        --set train.steps=6 "$@" 2>&1)
  rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "$name: exit $rc: $out"
  [ "$(grep -c '^merak_train:' <<< "$out")" -eq 1 ] || fail "$name: want one line: $out"
  grep -qF "$want" <<< "$out" || fail "$name: want '$want' in: $out"
  [ "$n" -gt 1 ] || [ "$rc" -eq 2 ] || fail "$name: exit $rc, want 2"
  echo "refused: $name: $(grep '^merak_train:' <<< "$out")"
}
ck="$tmp/ck-one/step_000000003"
cp -r "$ck" "$tmp/flipped"
file="$tmp/flipped/rank_00000.safetensors"
size=$(stat -c %s "$file")
printf '\xff' | dd of="$file" bs=1 seek=$((size / 2)) conv=notrunc status=none
bad bit-flip "$file: checksum mismatch in tensor '" 1,1,1 --resume "$tmp/flipped"
cp -r "$ck" "$tmp/truncated"
truncate -s $((size / 3)) "$tmp/truncated/rank_00000.safetensors"
bad truncated "$tmp/truncated/rank_00000.safetensors: truncated: tensor '" 2,2,1 \
  --resume "$tmp/truncated"
bad other-model "$ck/index.json: key 'model.hidden': 128 in the checkpoint, 64 in $configs/gpt-tiny.yaml; key 'model.heads': 4 in the checkpoint, 2 in" \
  1,2,1 --set model.hidden=64 --set model.heads=2 --resume "$ck"
# The tensors' shapes are checked too, for an index whose config does not tell the truth.
cp -r "$ck" "$tmp/relabelled"
sed -i 's/hidden: 128/hidden: 64/; s/heads: 4/heads: 2/' "$tmp/relabelled/index.json"
bad other-shapes "has shape [256, 128] there, [256, 64] here: a checkpoint of another model?" \
  1,2,1 --set model.hidden=64 --set model.heads=2 --resume "$tmp/relabelled"
# And its tensors' names: an index holding tensors the model does not have (its config relabelled
# to fewer layers) is refused naming one, not resumed from the part that fits.
cp -r "$ck" "$tmp/fewer-layers"
sed -i 's/layers: 4/layers: 3/' "$tmp/fewer-layers/index.json"
bad other-tensors "checkpoint $tmp/fewer-layers: tensor 'blocks.3." 1,2,1 --set model.layers=3 \
  --resume "$tmp/fewer-layers"
# A scalar of the state that is not a number: the file and the key, not the conversion's name.
cp -r "$ck" "$tmp/bad-scalar"
sed -i 's/"optimizer.steps": "[0-9]*"/"optimizer.steps": "x"/' "$tmp/bad-scalar/index.json"
bad bad-scalar "$tmp/bad-scalar/index.json: state 'optimizer.steps': 'x' is not a number" 1,1,1 \
  --resume "$tmp/bad-scalar"
# The index's config damaged (not YAML): refused, not skipped as one of another version is.
cp -r "$ck" "$tmp/bad-config"
/usr/bin/python3 -c 'import json, sys
d = json.load(open(sys.argv[1])); d["config"] = "model: [\n"; json.dump(d, open(sys.argv[1], "w"))' \
  "$tmp/bad-config/index.json"
bad bad-config "$tmp/bad-config/index.json: line 2, column 1: YAML syntax error" 1,1,1 \
  --resume "$tmp/bad-config"
mkdir -p "$tmp/empty-dir"
bad nothing-there "neither a step (no index.json) nor a checkpoint directory" 1,1,1 \
  --resume "$tmp/empty-dir"
bad no-such-path "merak_train: checkpoint '$tmp/no-such-path': does not exist" 1,1,1 \
  --resume "$tmp/no-such-path"
touch "$tmp/a-file"
bad unwritable "$tmp/a-file/ck" 2,1,1 --set checkpoint.dir="$tmp/a-file/ck"
# A disk that fills up mid-save (a file size limit: writes fail as on a full disk; one process,
# since MPI's shared memory files would hit the limit too), in the step loop and in the
# background: one line naming the file, and `latest` still names the last complete step.
rm -rf "$tmp/ck-full"
run full-before 1,1,1 gpt-tiny.yaml --set train.steps=2 --set checkpoint.dir="$tmp/ck-full"
for mode in false true; do
  out=$(ulimit -f 4096; "$train" --config "$configs/gpt-tiny.yaml" "${small[@]}" \
        --set train.steps=5 --set checkpoint.dir="$tmp/ck-full" --set checkpoint.every=2 \
        --set checkpoint.async="$mode" --resume auto 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] || fail "full disk (async $mode): exit $rc: $out"
  [ "$(grep -c '^merak_train:.*cannot write' <<< "$out")" -eq 1 ] ||
    fail "full disk (async $mode): want one line naming the file: $out"
  grep -q "^merak_train: cannot write '$tmp/ck-full/.step_000000004.tmp/rank_00000.safetensors': File too large" \
    <<< "$out" || fail "full disk (async $mode): message: $out"
  [ "$(cat "$tmp/ck-full/latest")" = "step_000000002" ] ||
    fail "full disk (async $mode): latest is $(cat "$tmp/ck-full/latest")"
  # The unfinished step is gone: on a full disk it would hold the room the next run needs.
  [ ! -e "$tmp/ck-full/.step_000000004.tmp" ] ||
    fail "full disk (async $mode): the failed save left $(ls -a "$tmp/ck-full")"
  echo "refused: full disk (async $mode): $(grep 'cannot write' <<< "$out"); latest: step_000000002"
done
# What a killed save left is cleared when a run starts, before its probe write (a full disk's
# leftovers would otherwise refuse every later start), not only at the next save.
mkdir "$tmp/ck-full/.step_000000003.tmp"
head -c 100000 /dev/zero > "$tmp/ck-full/.step_000000003.tmp/rank_00000.safetensors"
run full-after 1,1,1 gpt-tiny.yaml --set train.steps=2 --set checkpoint.dir="$tmp/ck-full" \
  --resume auto
[ ! -e "$tmp/ck-full/.step_000000003.tmp" ] && [ ! -e "$tmp/ck-full/.write_probe" ] ||
  fail "a start left what a killed save left: $(ls -a "$tmp/ck-full")"

# A stop asked by a signal (Ctrl-C's SIGINT; a scheduler's SIGTERM, here to one rank of two;
# SIGUSR1 to mpirun, which passes it on to every rank) ends every rank after its step with a
# checkpoint of that step and exit 128 + the signal (mpirun's too); --resume auto continues
# from it.
lines() { [ -f "$1" ] && wc -l < "$1" || echo 0; }
stop_run() {  # name signal ranks [to: rank (the last) or mpirun]
  local name="$1" sig="$2" n="$3" to="${4:-rank}" launch=() pid target waited=0
  [ "$n" -gt 1 ] && launch=(timeout $((300 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np "$n")
  "${launch[@]}" "$train" --config "$configs/gpt-tiny.yaml" "${small[@]}" --set parallel.dp="$n" \
    --set train.steps=100000 --set checkpoint.dir="$tmp/ck-$name" \
    --metrics "$tmp/$name.jsonl" > "$tmp/$name.log" 2>&1 &
  pid=$!
  while [ "$(lines "$tmp/$name.jsonl")" -lt 3 ] && [ "$waited" -lt 240 ]; do
    sleep 0.5; waited=$((waited + 1))
  done
  target=$pid  # one process; under timeout, mpirun or its last rank
  [ "$n" -gt 1 ] && target=$(pgrep -P "$pid" -x mpirun)
  [ "$n" -gt 1 ] && [ "$to" = rank ] && target=$(pgrep -P "$target" | tail -1)
  [ -n "$target" ] || fail "$name: no rank to signal"
  kill -"$sig" "$target"
  wait "$pid"
  local rc=$? want=$((128 + $(kill -l "$sig")))
  [ "$rc" -eq "$want" ] || fail "$name: exit $rc, want $want: $(tail -3 "$tmp/$name.log")"
  local done_steps
  done_steps=$(lines "$tmp/$name.jsonl")
  [ "$(cat "$tmp/ck-$name/latest")" = "$(printf 'step_%09d' "$done_steps")" ] ||
    fail "$name: latest $(cat "$tmp/ck-$name/latest") after $done_steps steps"
  grep -q "stopped by signal $(kill -l "$sig") .* after step $done_steps of 100000: saved" \
    "$tmp/$name.log" || fail "$name: $(tail -3 "$tmp/$name.log")"
  "$train" --config "$configs/gpt-tiny.yaml" "${small[@]}" --set train.steps=$((done_steps + 1)) \
    --set checkpoint.dir="$tmp/ck-$name" --resume auto > "$tmp/$name-resume.log" 2>&1 ||
    fail "$name: resume: $(tail -3 "$tmp/$name-resume.log")"
  grep -q "resumed from $tmp/ck-$name/step_.*: step $done_steps done" "$tmp/$name-resume.log" ||
    fail "$name: resume: $(head -5 "$tmp/$name-resume.log")"
  echo "stopped by $sig after step $done_steps (exit $rc), saved, resumed"
}
stop_run sigint INT 1
stop_run sigterm-one-rank TERM 2
stop_run sigusr1-mpirun USR1 2 mpirun

# Before the steps begin there is nothing to save: a signal during set-up ends the run at once
# (set-up may be long: a corpus tokenized, a checkpoint read), saving nothing. The signal is sent
# as soon as the process catches SIGTERM (its handler is in; set-up then still measures the
# FMA peak, at least ten trials, before any step).
"$train" --config "$configs/gpt-tiny.yaml" "${small[@]}" --set train.steps=100000 \
  --set checkpoint.dir="$tmp/ck-setup" > "$tmp/setup-stop.log" 2>&1 &
pid=$!
for ((waited = 0; waited < 1000; ++waited)); do
  mask=$(sed -n 's/^SigCgt:\s*//p' "/proc/$pid/status" 2>/dev/null)
  [ -n "$mask" ] && (( 0x$mask & (1 << 14) )) && break  # bit 14: SIGTERM
  sleep 0.01
done
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 143 ] && grep -q "^merak_train: stopped by a signal before training$" \
  "$tmp/setup-stop.log" && ! grep -q "^step " "$tmp/setup-stop.log" &&
  [ ! -e "$tmp/ck-setup/latest" ] || fail "a signal in set-up: exit $rc: $(cat "$tmp/setup-stop.log")"
echo "a signal in set-up: exit 143 at once, nothing saved"

# --resume auto: nothing saved yet is a fresh start.
run auto-fresh 1,1,1 gpt-tiny.yaml --set train.steps=2 --set checkpoint.dir="$tmp/ck-auto" \
  --resume auto
grep -q "^checkpoint: $tmp/ck-auto/step_000000002" "$tmp/auto-fresh.log" ||
  fail "auto: no fresh start and save: $(tail -3 "$tmp/auto-fresh.log")"
# (With the data's batch and seed changed: resumed, and a warning for each, as the steps now
# read other data than the uninterrupted run; and one for train.steps, where cosine decay ends.)
run auto-again 1,1,1 gpt-tiny.yaml --set train.steps=4 --set checkpoint.dir="$tmp/ck-auto" \
  --resume auto --set train.batch=8 --set data.seed=7
grep -q "resumed from $tmp/ck-auto/step_000000002: step 2 done" "$tmp/auto-again.log" ||
  fail "auto: did not resume: $(head -4 "$tmp/auto-again.log")"
index="$tmp/ck-auto/step_000000002/index.json"
for want in "key 'train.batch': 16 in the checkpoint ($index), 8 in $configs/gpt-tiny.yaml" \
            "key 'data.seed': 1234 in the checkpoint ($index), 7 in $configs/gpt-tiny.yaml"; do
  grep -qF "warning: $want: the resumed steps read the data in another order" \
    "$tmp/auto-again.log" || fail "auto: no warning '$want': $(head -6 "$tmp/auto-again.log")"
done
want="key 'train.steps': 2 in the checkpoint ($index), 4 in $configs/gpt-tiny.yaml"
grep -qF "warning: $want: the resumed steps follow another learning-rate schedule" \
  "$tmp/auto-again.log" || fail "auto: no warning '$want': $(head -6 "$tmp/auto-again.log")"
[ "$(grep -c '^warning: key' "$tmp/auto-again.log")" -eq 3 ] ||
  fail "auto: want 3 warnings: $(grep '^warning' "$tmp/auto-again.log")"
echo "resumed with train.batch and data.seed changed: $(grep '^warning: key' "$tmp/auto-again.log")"
# Dropout's masks follow the seed, not the micro-batch size (a sample draws by its row in the
# global batch): a changed seed under dropout is said, as is an optimizer setting, and a
# changed micro-batch is not.
run drop-a 1,1,1 gpt-tiny.yaml --set train.steps=2 --set model.dropout=0.1 \
  --set checkpoint.dir="$tmp/ck-drop"
run drop-b 1,1,1 gpt-tiny.yaml --set train.steps=3 --set model.dropout=0.1 \
  --set checkpoint.dir="$tmp/ck-drop" --resume auto --set train.micro_batch=8 --set train.seed=5 \
  --set optimizer.weight_decay=0.05
index="$tmp/ck-drop/step_000000002/index.json" here="$configs/gpt-tiny.yaml"
want="key 'train.seed': 42 in the checkpoint ($index), 5 in $here"
grep -qF "warning: $want: the resumed steps drop other elements than the uninterrupted run" \
  "$tmp/drop-b.log" || fail "dropout: no warning '$want': $(grep warning "$tmp/drop-b.log")"
! grep -q "micro_batch" "$tmp/drop-b.log" || fail "dropout: $(grep micro_batch "$tmp/drop-b.log")"
want="key 'optimizer.weight_decay': 0.1 in the checkpoint ($index), 0.05 in $here"
grep -qF "warning: $want: the resumed steps update the weights otherwise" "$tmp/drop-b.log" ||
  fail "no warning '$want': $(grep warning "$tmp/drop-b.log")"
echo "resumed under dropout with the seed, micro-batch and weight decay changed: 2 warnings"
echo "checkpoint_test: all checks passed"
