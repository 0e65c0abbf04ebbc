#!/usr/bin/env bash
# The communicator suite on the MPI backend: 8 ranks, oversubscribed on however many cores
# there are; then the cases any backend passes with every group a NodeCommunicator (f32 sums and
# maxima through shared memory), and with every group staging "device" buffers through the host
# (StagedCommunicator). The suite prints pass/fail counts per case and in total.
set -u
suite="$1"
# Shared memory between the ranks of this machine only: no probing of network interfaces.
export OMPI_MCA_btl=self,vader
status=0
for mode in "" --shared-memory --staged; do
  timeout $((180 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np 8 "$suite" $mode
  rc=$?
  [ "$rc" -eq 124 ] && echo "FAIL: the suite ${mode:-(mpi)} did not end within 180 s"
  [ "$rc" -ne 0 ] && status=1
done
exit "$status"
