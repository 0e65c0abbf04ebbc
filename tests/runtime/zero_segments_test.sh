#!/usr/bin/env bash
# ZeRO-1 over 4 ranks of one node with stages too small to give every member a segment: every
# member's parameters are all updated (shared memory and MPI).
set -u
bin="$1"
export OMPI_MCA_btl=self,vader
timeout $((120 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np 4 "$bin"
