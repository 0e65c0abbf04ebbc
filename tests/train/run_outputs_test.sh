#!/usr/bin/env bash
# What merak_train writes besides stdout (--metrics, --trace, --tensorboard): a path it cannot
# write ends the run before training with exit 2 and one line, in one process and on every rank
# of a job; the metrics are valid JSON when the loss diverges (with a warning, once), and a
# resumed run keeps the steps it continues from (a symbolic link given as --metrics stays one);
# ranks that read different configs are refused.
# Also: repeated flags are refused, and "of peak" counts no more cores than the machine has.
set -u
train="$1"
configs="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
tiny=(--config "$configs/gpt-tiny.yaml" --set model.layers=1)
: > "$tmp/file"  # a file, so "$tmp/file/x" cannot be made

# One process: each bad path fails before the first step, with one line naming the flag.
for flag in --metrics --trace --tensorboard; do
  out=$("$train" "${tiny[@]}" --set train.steps=2 --log-level warn $flag "$tmp/file/x" 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] || fail "$flag: exit $rc, want 2: $out"
  [ "$(grep -c "^merak_train: $flag: .*$tmp/file/x" <<< "$out")" -eq 1 ] ||
    fail "$flag: want one line naming the flag and path: $out"
  ! grep -q '^step ' <<< "$out" || fail "$flag: trained before refusing: $out"
done
echo "bad output paths refused before training, one process"

# A job of 2 ranks: the same line once and exit 2, in seconds (not a wait for comm_timeout).
mpi=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
     timeout $((60 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --oversubscribe)
for flag in --metrics --trace --tensorboard; do
  out=$("${mpi[@]}" -np 2 "$train" "${tiny[@]}" --set parallel.dp=2 --set train.steps=2 \
        --set parallel.comm_timeout=30 $flag "$tmp/file/x" 2>&1); rc=$?
  [ "$rc" -eq 2 ] || fail "mpirun, $flag: exit $rc, want 2: $out"
  [ "$(grep -c "^merak_train: $flag: .*$tmp/file/x" <<< "$out")" -eq 1 ] ||
    fail "mpirun, $flag: want the line once: $out"
done
echo "bad output paths refused by every rank of a job"

# Ranks that read different configs (here other --set flags, launched MPMD) are refused before
# training, naming the first key that differs; they hung at the shorter run's end before.
out=$("${mpi[@]}" -np 1 "$train" "${tiny[@]}" --set parallel.dp=2 --set train.steps=3 \
      --set parallel.comm_timeout=30 : -np 1 "$train" "${tiny[@]}" --set parallel.dp=2 \
      --set train.steps=2 --set parallel.comm_timeout=30 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "rank 1 read another config than rank 0 ('train.steps: 2' where rank 0 has 'train.steps: 3')" <<< "$out" ||
  fail "mpirun, different configs: exit $rc: $out"
! grep -q '^step ' <<< "$out" || fail "different configs: trained before refusing: $out"
echo "ranks with different configs refused before training"

# One rank under mpirun writes plain lines to a redirected output: mpirun gives its ranks a
# terminal of their own, which is not where the output goes, so no progress bar is drawn.
"${mpi[@]}" -np 1 "$train" "${tiny[@]}" --set train.steps=3 > "$tmp/np1.out" 2>&1 ||
  fail "mpirun -np 1: $(tail -3 "$tmp/np1.out")"
! grep -q $'\r' "$tmp/np1.out" || fail "mpirun -np 1: a progress bar in the redirected output"
grep -q '^done: 3 steps' "$tmp/np1.out" || fail "mpirun -np 1: $(tail -3 "$tmp/np1.out")"
echo "mpirun -np 1: no progress bar in redirected output"

# A diverging loss: JSON null in the metrics (valid JSON), and one warning naming the step.
out=$("$train" "${tiny[@]}" --set train.steps=4 --set optimizer.lr=1e30 \
      --set optimizer.grad_clip=0 --metrics "$tmp/nan.jsonl" 2>&1); rc=$?
[ "$rc" -eq 0 ] || fail "diverging run: exit $rc: $out"
/usr/bin/python3 - "$tmp/nan.jsonl" <<'PY' || fail "diverging run: metrics: $(cat "$tmp/nan.jsonl")"
import json, sys
lines = [json.loads(l, parse_constant=lambda c: sys.exit("not JSON: " + c))
         for l in open(sys.argv[1])]
assert len(lines) == 4 and any(l["loss"] is None for l in lines), lines
PY
[ "$(grep -c '^warning: step [0-9]*: the loss is .*nan' <<< "$out")" -eq 1 ] ||
  fail "diverging run: want one warning: $out"
echo "non-finite loss: null in the metrics, one warning"

# Resuming keeps the metrics of the steps it continues from and drops the later ones (and a
# line cut short); a fresh run starts the file anew; a file that is not ours is left alone.
steps() { sed -E 's/^\{"step": ([0-9]+),.*/\1/' "$1" | tr '\n' ' '; }
ck=(--set checkpoint.dir="$tmp/ck" --set checkpoint.every=2 --metrics "$tmp/m.jsonl"
    --log-level warn)
"$train" "${tiny[@]}" "${ck[@]}" --set train.steps=4 > "$tmp/run.log" 2>&1 ||
  fail "checkpointed run: $(cat "$tmp/run.log")"
printf '{"step": 5, "loss": 1.' >> "$tmp/m.jsonl"
"$train" "${tiny[@]}" "${ck[@]}" --set train.steps=5 --resume "$tmp/ck/step_000000002" \
  > "$tmp/run.log" 2>&1 || fail "resumed run: $(cat "$tmp/run.log")"
[ "$(steps "$tmp/m.jsonl")" = "1 2 3 4 5 " ] || fail "resumed metrics: $(cat "$tmp/m.jsonl")"
/usr/bin/python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' \
  "$tmp/m.jsonl" || fail "resumed metrics are not JSON lines: $(cat "$tmp/m.jsonl")"
echo 'notes: ours' >> "$tmp/m.jsonl"
cp "$tmp/m.jsonl" "$tmp/before.jsonl"
out=$("$train" "${tiny[@]}" "${ck[@]}" --set train.steps=6 --resume auto 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "^merak_train: --metrics: .*m.jsonl' line 6 is not a metrics line" \
  <<< "$out" || fail "foreign line: exit $rc: $out"
cmp -s "$tmp/m.jsonl" "$tmp/before.jsonl" || fail "foreign line: the file was changed"
# A fresh run would replace the file: refused as well while it holds a line not ours.
out=$("$train" "${tiny[@]}" --set train.steps=1 --metrics "$tmp/m.jsonl" 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "^merak_train: --metrics: .*m.jsonl' line 6 is not a metrics line of merak_train; the run would rewrite the file" \
  <<< "$out" || fail "foreign line, fresh run: exit $rc: $out"
cmp -s "$tmp/m.jsonl" "$tmp/before.jsonl" || fail "foreign line, fresh run: the file was changed"
sed -i '/^notes: ours$/d' "$tmp/m.jsonl"
"$train" "${tiny[@]}" --set train.steps=1 --metrics "$tmp/m.jsonl" > "$tmp/run.log" 2>&1 ||
  fail "fresh run: $(cat "$tmp/run.log")"
[ "$(steps "$tmp/m.jsonl")" = "1 " ] || fail "fresh run kept old metrics: $(cat "$tmp/m.jsonl")"
echo "resumed metrics keep steps 1-2 and continue; fresh ones start anew"

# An output named after what the run reads or keeps is refused before anything is written: the
# config as --metrics, a checkpoint's tensors as --trace, one file for both.
cp "$configs/gpt-tiny.yaml" "$tmp/own.yaml"
cp "$tmp/own.yaml" "$tmp/own-before.yaml"
shard=$(ls "$tmp/ck/step_000000002/"*.safetensors | head -1)
cp "$shard" "$tmp/shard-before"
for args in "--metrics $tmp/own.yaml" "--trace $shard" "--metrics $tmp/x.jsonl --trace $tmp/x.jsonl"; do
  out=$("$train" --config "$tmp/own.yaml" --set train.steps=1 --set model.layers=1 $args 2>&1); rc=$?
  [ "$rc" -eq 2 ] && [ "$(wc -l <<< "$out")" -eq 1 ] || fail "$args: exit $rc: $out"
  echo "$args: $out"
done
cmp -s "$tmp/own.yaml" "$tmp/own-before.yaml" && cmp -s "$shard" "$tmp/shard-before" ||
  fail "a refused output path was written"

# --metrics through a symbolic link writes the file it names, fresh and resumed; the link stays.
mkdir -p "$tmp/real"
ln -s "$tmp/real/m.jsonl" "$tmp/link.jsonl"
ln -s "$tmp/real/m.jsonl" "$tmp/link2.jsonl"  # a second name for it, to read it by
ck=(--set checkpoint.dir="$tmp/ck_link" --set checkpoint.every=2 --metrics "$tmp/link.jsonl"
    --log-level warn)
"$train" "${tiny[@]}" "${ck[@]}" --set train.steps=3 > "$tmp/run.log" 2>&1 ||
  fail "run through a link: $(cat "$tmp/run.log")"
[ -L "$tmp/link.jsonl" ] || fail "fresh run: --metrics replaced the symbolic link"
"$train" "${tiny[@]}" "${ck[@]}" --set train.steps=4 --resume auto > "$tmp/run.log" 2>&1 ||
  fail "resumed run through a link: $(cat "$tmp/run.log")"
[ -L "$tmp/link.jsonl" ] || fail "resumed run: --metrics replaced the symbolic link"
[ "$(steps "$tmp/link2.jsonl")" = "1 2 3 4 " ] ||
  fail "metrics through a link: $(cat "$tmp/real/m.jsonl")"
echo "--metrics through a symbolic link keeps the link and writes its file"

# A flag with a value given twice is refused, as the other tools do; --set repeats.
for flag in --config --metrics --trace --tensorboard --resume --log-level --hardware; do
  value=a; [ "$flag" = --log-level ] && value=info
  out=$("$train" "${tiny[@]}" $flag $value $flag $value 2>&1); rc=$?
  [ "$rc" -eq 2 ] && grep -q "^merak_train: $flag given more than once$" <<< "$out" ||
    fail "$flag twice: exit $rc: $out"
done
out=$("$train" "${tiny[@]}" --dry-run --world 1 --world 2 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "given more than once" <<< "$out" || fail "--world twice: $out"
out=$("$train" "${tiny[@]}" --dry-run --world 99999999999999999999999 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "^merak_train: --world needs a positive whole number" <<< "$out" ||
  fail "--world beyond int64: exit $rc: $out"
echo "repeated flags refused"

# "Of peak" counts the cores there are: more threads than cores (here train.threads; under
# mpirun, more ranks than cores) add none.
cores=$(getconf _NPROCESSORS_ONLN)
out=$("$train" "${tiny[@]}" --set train.steps=1 --set train.threads=$((2 * cores)) 2>&1) ||
  fail "threads above the cores: $out"
grep -Eq "peak [0-9]+ GFLOP/s \([0-9]+ a core, measured, x $cores cores?\)" <<< "$out" ||
  fail "threads above the cores: the peak counts $((2 * cores)) threads, want $cores cores: $out"
if [ "$cores" -lt 4 ]; then
  out=$("${mpi[@]}" -np 4 "$train" "${tiny[@]}" --set parallel.dp=4 --set train.steps=1 2>&1) ||
    fail "4 ranks on $cores cores: $out"
  grep -Eq "x $cores cores?\)" <<< "$out" || fail "4 ranks on $cores cores: peak: $out"
fi
echo "the peak counts $cores cores"

echo "run_outputs_test: all checks passed"
