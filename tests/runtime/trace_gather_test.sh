#!/usr/bin/env bash
# The trace's spans are gathered to rank 0 alone (3 ranks): it gets every rank's, the others none.
set -u
bin="$1"
export OMPI_MCA_btl=self,vader
timeout $((120 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np 4 "$bin"
