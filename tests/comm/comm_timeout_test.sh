#!/usr/bin/env bash
# A rank that never posts its side of an operation: the job must end within the timeout,
# with a non-zero status and one message naming the operation, group and peer.
set -u
bin="$1"
export OMPI_MCA_btl=self,vader
fail() { echo "FAIL: $*"; exit 1; }

# expect_timeout NP SCENARIO MESSAGE: the job (given 2 s; 60 s would mean a hang) ends with a
# non-zero status, well before 30 s, printing MESSAGE exactly once.
expect_timeout() {
  local np="$1" scenario="$2" want="$3" start=$SECONDS out rc secs
  out=$(timeout $((60 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np "$np" "$bin" "$scenario" 2 2>&1)
  rc=$?
  secs=$((SECONDS - start))
  [ "$rc" -ne 124 ] || fail "$scenario: the job hung (killed after 60 s): $out"
  [ "$rc" -ne 0 ] || fail "$scenario: exit status 0: $out"
  grep -qF "$want" <<< "$out" || fail "$scenario: message lacks \"$want\": $out"
  [ "$(grep -cF "$want" <<< "$out")" -eq 1 ] || fail "$scenario: want one message: $out"
  [ "$secs" -lt 30 ] || fail "$scenario: took $secs s"
  echo "$scenario: ended in ${secs} s with status $rc: $(grep -F "$want" <<< "$out")"
}

expect_timeout 2 p2p "comm timeout after 2 s: send of 1048576 f32 to peer 1 (world rank 1), tag 5 on group 'world' (rank 0 of 2, world ranks 0,1) did not finish"
expect_timeout 4 collective "comm timeout after 2 s: all_reduce (sum) of 1024 f32 on group 'tp' (rank 0 of 4, world ranks 0,1,2,3) did not finish"
expect_timeout 3 node_sum "shared-memory sum over group 'tp' (rank 0 of 3, world ranks 0,1,2): peer 2 (world rank 2) has not posted region 0 of round 1 after 2 s"
expect_timeout 3 node_all_reduce "shared-memory all-reduce over group 'tp' (rank 0 of 3, world ranks 0,1,2): peer 2 (world rank 2) has not posted round 1 after 2 s"
echo "comm_timeout_test: 4 passed, 0 failed"
