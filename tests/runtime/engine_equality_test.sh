#!/usr/bin/env bash
# The engine's losses equal the single process's (its (1,1,1) layout, run without MPI) within
# 1e-5 relative, step by step: GPT under (dp, pp, tp) = (1,1,1), (2,1,1), (1,2,1), (1,1,2),
# (2,2,2), then BERT at (2,2,2), each under every schedule with recomputation on and off (one mpirun per layout); and GPT with
# dropout (residual branches and attention probabilities) at (2,2,2): recomputation and tp
# shards (a rank's heads) re-derive the same masks. The single process's losses at half the
# micro-batch are its losses within 1e-6, with dropout too (masks drawn by each sample's row in
# the global batch) and for BERT (its masked-LM loss is the mean over the global batch's
# predicted tokens).
set -u
bin="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
# Shared memory between the ranks of this machine only; ranks waiting in MPI yield the core.
export OMPI_MCA_btl=self,vader
export OMPI_MCA_mpi_yield_when_idle=1
export MERAK_NUM_THREADS=1
status=0
run() {  # family dp pp tp [dropout]
  local n=$(($2 * $3 * $4)) p="${5:-0.0}"
  timeout $((240 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np "$n" \
    "$bin" --family "$1" --dropout "$p" --layout "$2,$3,$4" --expect "$tmp/$1-$p.ref"
  local rc=$?
  [ "$rc" -eq 124 ] && echo "FAIL: $1 ($2,$3,$4) did not end within 240 s"
  [ "$rc" -ne 0 ] && { echo "FAIL: $1 ($2,$3,$4): exit $rc"; status=1; }
}
for ref in "gpt 0.0" "gpt 0.1" "bert 0.0"; do
  set -- $ref
  "$bin" --family "$1" --dropout "$2" --reference "$tmp/$1-$2.ref" ||
    { echo "FAIL: $1 reference"; exit 1; }
done
run gpt 1 1 1
run gpt 2 1 1
run gpt 1 2 1
run gpt 1 1 2
run gpt 2 2 2
run bert 2 2 2
run gpt 2 2 2 0.1
[ "$status" -eq 0 ] && echo "engine_equality_test: every layout matches the single process"
exit "$status"
