#!/usr/bin/env bash
# Shared-memory windows on a shared-memory file system too small for them (an 8 MiB tmpfs, like
# the 64 MiB /dev/shm of a Docker container against a larger model): refused with the reason,
# the work going by messages; two groups making theirs at once each count the other's. Mounts the tmpfs in a private mount namespace (root and unshare
# needed, as for the rest of the suite: without them the test fails saying so, since a check
# that did not run is not a pass).
set -u
bin="$1"
export OMPI_MCA_btl=self,vader
dir="${TEST_TMPDIR:-$(mktemp -d)}/shm"
mkdir -p "$dir"
if ! unshare -m sh -c "mount -t tmpfs -o size=8m tmpfs '$dir'" 2>/dev/null; then
  echo "shm_room_test: FAILED: cannot mount a tmpfs here (the test needs root and unshare -m)"
  exit 1
fi
export OMPI_MCA_osc_sm_backing_directory="$dir"
# One group of 2 ranks, then two groups of 2 making windows at once (4 ranks).
launch="timeout $((120 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root \
  --oversubscribe -x OMPI_MCA_osc_sm_backing_directory"
exec unshare -m sh -c "mount -t tmpfs -o size=8m tmpfs '$dir' &&
  $launch -np 2 '$bin' 8 && $launch -np 4 '$bin' 8"
