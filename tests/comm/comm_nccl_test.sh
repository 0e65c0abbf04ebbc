#!/usr/bin/env bash
# The communicator suite on the NCCL backend, one rank per GPU (at most 8; MERAK_NCCL_RANKS
# overrides). Without a GPU it reports "skipped: ..." and exits 77, so it never counts as a pass.
set -u
suite="$1"
export OMPI_MCA_btl=self,vader
out=$("$suite" --count-devices)
rc=$?
if [ "$rc" -ne 0 ]; then
  echo "$out"
  exit "$rc"
fi
np=${MERAK_NCCL_RANKS:-$((out < 8 ? out : 8))}
echo "comm_nccl_test: $out GPU(s), $np rank(s)"
timeout $((300 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np "$np" "$suite"
