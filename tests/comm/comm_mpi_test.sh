#!/usr/bin/env bash
# The communicator suite on the MPI backend: 8 ranks, oversubscribed on however many cores
# there are. The suite prints pass/fail counts per case and in total.
set -u
suite="$1"
# Shared memory between the ranks of this machine only: no probing of network interfaces.
export OMPI_MCA_btl=self,vader
timeout 180 mpirun --allow-run-as-root --oversubscribe -np 8 "$suite"
rc=$?
[ "$rc" -eq 124 ] && echo "FAIL: the suite did not end within 180 s"
exit "$rc"
