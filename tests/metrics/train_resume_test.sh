#!/usr/bin/env bash
# A resumed merak_train and its outputs: the new TensorBoard event file starts with a SessionLog
# START at the first step it runs (TensorBoard then drops the abandoned run's records of those
# steps from the older file; a fresh run's START is at step 1, dropping an earlier attempt's), and
# the closing summary counts and names the steps this process ran, not train.steps. A resume with
# nothing to run leaves the metrics and trace files as they were; a fresh run over checkpoints
# is said; a metrics line or event record that cannot be written ends the run with exit 2.
set -u
train="$1"
configs="$2"
reader="$3"
python="${PYTHON:-/usr/bin/python3}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
run=("$train" --config "$configs/gpt-tiny.yaml" --set model.layers=1 --log-level warn
     --set checkpoint.dir="$tmp/ck" --set checkpoint.every=3 --tensorboard "$tmp/tb")

out=$("${run[@]}" --set train.steps=5 2>&1) || fail "first run: $out"
grep -q '^done: 5 steps | loss ' <<< "$out" || fail "first run: summary: $(grep '^done' <<< "$out")"
first=$(ls "$tmp"/tb/events.out.tfevents.*)
# (The resumed run's file is named after the same second or a later one, ".1" added in the same
# second: either way it sorts, and TensorBoard reads it, after the first.)
out=$("${run[@]}" --set train.steps=6 --resume "$tmp/ck/step_000000003" 2>&1) ||
  fail "resumed run: $out"
# Steps 4 to 6 ran; the loss quoted first is step 4's.
summary=$(grep '^done:' <<< "$out")
grep -q '^done: 3 steps (4 to 6) | loss ' <<< "$summary" || fail "resumed run: summary: $summary"
second=$(ls "$tmp"/tb/events.out.tfevents.* | grep -v -x -F "$first")
[ "$(wc -l <<< "$second")" -eq 1 ] || fail "want one new event file: $second"

"$python" "$reader" "$first" > "$tmp/first.txt" || fail "the first event file does not decode"
"$python" "$reader" "$second" > "$tmp/second.txt" || fail "the resumed event file does not decode"
[ "$(sed -n 2p "$tmp/first.txt" | cut -f1,2)" = $'start\t1' ] ||
  fail "fresh event file, second record: $(sed -n 2p "$tmp/first.txt")"
# Right after the version record: START at step 4, then steps 4 to 6 only.
[ "$(sed -n 2p "$tmp/second.txt" | cut -f1,2)" = $'start\t4' ] ||
  fail "resumed event file, second record: $(sed -n 2p "$tmp/second.txt")"
steps=$(awk -F'\t' '$1 == "scalar" && $5 == "train/loss" {printf "%s ", $2}' "$tmp/second.txt")
[ "$steps" = "4 5 6 " ] || fail "resumed event file: train/loss steps $steps"
echo "resume: START at step 4 in $(basename "$second"); summary: $summary"

# Nothing to run (the checkpoint is at train.steps): said, and it ends there, the metrics and
# trace files untouched; no warning about the schedule of steps that will not run (the
# checkpoint's run had train.steps 5).
printf '{"step": %d, "loss": 5.5}\n' 1 2 3 4 > "$tmp/m.jsonl"  # an earlier run's lines
echo '{"traceEvents": []}' > "$tmp/t.json"
cp "$tmp/m.jsonl" "$tmp/m.before"; cp "$tmp/t.json" "$tmp/t.before"
out=$("${run[@]}" --set train.steps=3 --resume "$tmp/ck/step_000000003" \
      --metrics "$tmp/m.jsonl" --trace "$tmp/t.json" 2>&1) || fail "nothing to run: $out"
grep -q '^done: nothing to run' <<< "$out" || fail "nothing to run: $out"
! grep -q '^warning' <<< "$out" || fail "nothing to run, yet warned: $out"
cmp -s "$tmp/m.jsonl" "$tmp/m.before" || fail "nothing to run changed the metrics file"
cmp -s "$tmp/t.json" "$tmp/t.before" || fail "nothing to run changed the trace file"

# A fresh run saving where an earlier run's checkpoints are is said (its saves move latest back).
out=$("${run[@]}" --set train.steps=1 2>&1) || fail "fresh run over checkpoints: $out"
grep -q "^warning: checkpoint.dir $tmp/ck holds an earlier run's checkpoint" <<< "$out" ||
  fail "fresh run over checkpoints: no warning: $out"

# A metrics line that cannot be written ends the run naming the file (a file size limit stands
# in for a full disk: merak_train ignores SIGXFSZ, so the write fails with EFBIG).
# Exit 2 and one line, as a checkpoint's failed write (not an internal error's exit 1).
out=$(ulimit -f 1; "$train" --config "$configs/gpt-tiny.yaml" --set model.layers=1 \
      --set train.steps=20 --metrics "$tmp/full.jsonl" 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q -- "^merak_train: --metrics: cannot write '$tmp/full.jsonl' (File too large)" <<< "$out" ||
  fail "metrics write failure: exit $rc: $(tail -3 <<< "$out")"
# So does an event file that cannot take a step's scalars (64 records fill its first KiB): in
# the step loop (20 steps), or in the last flush before the run says it is done (10 steps' 62
# records never reach the flush threshold). One line: the writer does not report it again.
for steps in 20 10; do
  out=$(ulimit -f 1; "$train" --config "$configs/gpt-tiny.yaml" --set model.layers=1 \
        --set train.steps=$steps --tensorboard "$tmp/tb-full-$steps" --log-level warn 2>&1); rc=$?
  [ "$rc" -eq 2 ] &&
    grep -q -- "^merak_train: --tensorboard: .*$tmp/tb-full-$steps/events.out.tfevents" <<< "$out" ||
    fail "event file write failure ($steps steps): exit $rc: $(tail -3 <<< "$out")"
  [ "$(grep -c -i "tensorboard" <<< "$out")" -eq 1 ] ||
    fail "event file write failure ($steps steps): want one line: $out"
done
# A pipe (or a device) as the metrics file is written as it is, never replaced by a file.
mkfifo "$tmp/pipe"
cat "$tmp/pipe" > "$tmp/from-pipe" &
reader=$!
out=$("$train" --config "$configs/gpt-tiny.yaml" --set model.layers=1 --set train.steps=3 \
      --metrics "$tmp/pipe" 2>&1) || fail "metrics into a pipe: $out"
wait "$reader"
[ -p "$tmp/pipe" ] || fail "metrics into a pipe: the pipe was replaced: $(ls -l "$tmp/pipe")"
[ "$(grep -c '"step": ' "$tmp/from-pipe")" -eq 3 ] ||
  fail "metrics into a pipe: the reader got: $(cat "$tmp/from-pipe")"
echo "train_resume_test: all checks passed"
