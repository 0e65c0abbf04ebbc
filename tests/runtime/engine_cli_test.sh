#!/usr/bin/env bash
# merak_train's parallel path: a layout that does not match the job's size, or a bad hardware
# profile, ends every rank with one line naming the key; a short 3D run (dp 2, pp 2, tp 2 on 8
# ranks) prints its steps with the time breakdown and writes metrics and a Chrome trace; a step of
# 1536 micro-batches a replica runs at dp 2 and at pp 2.
set -u
train="$1"
configs="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
export OMPI_MCA_btl=self,vader
export OMPI_MCA_mpi_yield_when_idle=1
mpi() { timeout $((120 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np "$@"; }
cfg="$configs/gpt-tiny-3d.yaml"

out=$("$train" --config "$cfg" 2>&1); rc=$?
[ "$rc" -eq 2 ] || fail "one process for 8 ranks: exit $rc, want 2 ($out)"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "one process: more than one line: $out"
grep -q "key 'parallel': dp 2 x pp 2 x tp 2 needs 8 ranks, but the job has 1" <<< "$out" ||
  fail "one process: message: $out"

out=$(mpi 3 "$train" --config "$cfg" 2>&1); rc=$?
[ "$rc" -ne 0 ] || fail "3 ranks for 8: exit 0"
[ "$(grep -c '^merak_train:' <<< "$out")" -eq 1 ] || fail "3 ranks: want one line: $out"
grep -q "needs 8 ranks, but the job has 3 (start it with mpirun -np 8 or srun -n 8)" <<< "$out" ||
  fail "3 ranks: message: $out"

out=$(mpi 2 "$train" --config "$cfg" --set parallel.dp=1 --set parallel.tp=1 \
      --set parallel.hardware=nope 2>&1); rc=$?
[ "$rc" -ne 0 ] || fail "bad hardware: exit 0"
[ "$(grep -c '^merak_train:' <<< "$out")" -eq 1 ] || fail "bad hardware: want one line: $out"
grep -q "key 'parallel.hardware': hardware profile 'nope' not found" <<< "$out" ||
  fail "bad hardware: message: $out"

# mpirun -np 1 is a job of one rank: its groups are MPI communicators (not the single process's).
out=$(mpi 1 "$train" --config "$configs/gpt-tiny.yaml" --set train.steps=2 --set model.layers=1 2>&1)
rc=$?
[ "$rc" -eq 0 ] && grep -q "^  groups talk over MPI$" <<< "$out" || fail "mpirun -np 1: exit $rc: $out"

# A GPU job where there is none: every rank stops at the grid (make_grid agrees on the first
# rank's problem before any group is made), one line, exit 2.
out=$(mpi 2 "$train" --config "$configs/gpt-tiny.yaml" --set parallel.dp=2 \
      --set train.device=cuda 2>&1); rc=$?
if [ "$rc" -ne 0 ]; then
  [ "$(grep -c '^merak_train:' <<< "$out")" -eq 1 ] || fail "cuda without a GPU: want one line: $out"
  # (On a machine with one GPU the second rank has none of its own: that one line instead.)
  grep -Eq "key 'train.device': cuda, but no CUDA device was found \(|has none \(train.device: cuda" \
    <<< "$out" || fail "cuda without a GPU: message: $out"
else
  grep -q "cuda:" <<< "$out" || fail "cuda on a machine with GPUs: not on one: $out"
fi

out=$(mpi 8 "$train" --config "$cfg" --set train.steps=4 --set train.log_interval=2 \
      --set model.layers=2 --set train.seq_len=32 --metrics "$tmp/m.jsonl" \
      --trace "$tmp/t.json" 2>&1); rc=$?
[ "$rc" -eq 0 ] || fail "3D run: exit $rc: $out"
grep -q "dp 2, pp 2, tp 2 on 8 ranks" <<< "$out" || fail "3D run: no layout line: $out"
[ "$(grep -c '^step ' <<< "$out")" -eq 3 ] || fail "3D run: want step lines 1, 2, 4: $out"
grep '^step ' <<< "$out" | grep -q "compute .*p2p wait .*collectives .*bubble" ||
  fail "3D run: no time breakdown: $out"
grep -q '^done: 4 steps' <<< "$out" || fail "3D run: no summary: $out"
# Every rank's peak next to the partitioner's estimate for it.
[ "$(grep '^peak host memory per rank' <<< "$out" | grep -o 'rank [0-7] [0-9.]* MiB ([0-9.]* MiB, x' | wc -l)" -eq 8 ] ||
  fail "3D run: want 8 ranks' peak memory with estimates: $out"
report="data-parallel gradient sums: shared memory, buckets of 1 MiB; parameters: one shared"
grep -q "$report copy, each replica updating 1/2" <<< "$out" ||
  fail "3D run: no data-parallel report (shared sums and parameters): $out"
grep -q "^  tensor-parallel all-reduces: shared memory$" <<< "$out" ||
  fail "3D run: no tensor-parallel report (shared memory): $out"
[ "$(wc -l < "$tmp/m.jsonl")" -eq 4 ] || fail "3D run: want 4 metrics lines"
[ "$(grep -c '"thread_name"' "$tmp/t.json")" -eq 8 ] || fail "trace: want 8 rank tracks"
# Every rank's forwards and backwards: 4 steps x 4 micro-batches of each, on each of 8 ranks.
[ "$(grep -c '"name": "F[0-9]*", "cat": "compute"' "$tmp/t.json")" -eq 128 ] ||
  fail "trace: want 128 forward spans: $(grep -c '"name": "F' "$tmp/t.json")"
# The micro-batch count is bounded by memory, not by message tags: gpt20b's 1536 micro-batches
# a replica and step, at dp 2 (the sums over replicas) and at pp 2 (1536 activations and
# gradients each way across the cut).
for layout in "parallel.dp=2 train.batch=3072" "parallel.pp=2 train.batch=1536"; do
  set -- $layout
  out=$(mpi 2 "$train" --config "$configs/gpt-tiny.yaml" --set "$1" --set "$2" \
        --set train.micro_batch=1 --set train.seq_len=16 --set train.steps=1 2>&1); rc=$?
  [ "$rc" -eq 0 ] || fail "1536 micro-batches ($layout): exit $rc: $out"
  grep -q "in 1536 micro-batches of 1 per replica" <<< "$out" ||
    fail "1536 micro-batches ($layout): not what ran: $out"
  grep -q "^step     1/1 | loss 5\.5[0-9]* " <<< "$out" ||
    fail "1536 micro-batches ($layout): no first-step loss near ln 256: $out"
  echo "1536 micro-batches a replica ran: $layout"
done
echo "engine_cli_test: all checks passed"
