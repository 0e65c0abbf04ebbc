#!/usr/bin/env bash
# Pipeline sends are let go as they finish, not at the step's end: at pp 2 over MPI, each rank's
# peak memory is the same for 8 and for 64 micro-batches a step (1F1B keeps a bounded number in
# flight). Holding every send to the step's end would add the 2 x 32 KiB crossing the cut per
# micro-batch: 3.5 MiB more at 64.
set -u
train="$1"
configs="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMPI_MCA_btl=self,vader
export OMPI_MCA_mpi_yield_when_idle=1
mpi() {
  timeout $((120 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np "$@"
}

# Each rank's measured peak in KiB, one a line, from the "peak host memory per rank" line.
peaks() {
  local out
  out=$(mpi 2 "$train" --config "$configs/gpt-tiny.yaml" --set parallel.pp=2 \
        --set model.layers=2 --set train.micro_batch=1 --set train.batch="$1" \
        --set train.steps=2 --set train.threads=1 2>&1) || fail "batch $1: exit $?: $out"
  grep '^peak host memory per rank' <<< "$out" | grep -o 'rank [01] [0-9.]* MiB' |
    awk '{ printf "%d\n", $3 * 1024 }'
  [ "$(grep '^peak host memory per rank' <<< "$out" | grep -o 'rank [01] ' | wc -l)" -eq 2 ] ||
    fail "batch $1: want both ranks' peak: $out"
}
few=($(peaks 8)) || exit 1
many=($(peaks 64)) || exit 1
for r in 0 1; do
  # 256 KiB: a few boundary values either way, well under the 3.5 MiB of holding them all.
  [ "${many[$r]}" -le $((${few[$r]} + 256)) ] ||
    fail "rank $r: peak ${many[$r]} KiB at 64 micro-batches, ${few[$r]} KiB at 8"
done
echo "peaks (KiB) at 8 micro-batches: ${few[*]}; at 64: ${many[*]}"
