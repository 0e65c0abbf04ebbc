#!/usr/bin/env bash
# A rank that never posts its side of an operation: the job must end within the timeout,
# with a non-zero status and one message naming the operation, group and peer.
set -u
bin="$1"
export OMPI_MCA_btl=self,vader
fail() { echo "FAIL: $*"; exit 1; }

# expect_timeout NP SCENARIO PATTERN [WAIT_S]: the job (timeouts WAIT_S, 2 s unless given; 60 s
# would mean a hang) ends with a
# non-zero status, well before 30 s; every rank's "merak: [rank R] ..." line matches PATTERN (an
# extended regex), and at least one is printed.
expect_timeout() {
  local np="$1" scenario="$2" want="$3" wait_s="${4:-2}" start=$SECONDS out rc secs said
  out=$(timeout $((60 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np "$np" "$bin" "$scenario" "$wait_s" 2>&1)
  rc=$?
  secs=$((SECONDS - start))
  [ "$rc" -ne 124 ] || fail "$scenario: the job hung (killed after 60 s): $out"
  [ "$rc" -ne 0 ] || fail "$scenario: exit status 0: $out"
  said=$(grep -E '^merak: \[rank [0-9]+\] ' <<< "$out")
  [ -n "$said" ] || fail "$scenario: no rank said why: $out"
  while IFS= read -r line; do
    grep -qE "^merak: \[rank [0-9]+\] $want\$" <<< "$line" ||
      fail "$scenario: a message does not match \"$want\": $line"
  done <<< "$said"
  [ "$(cut -d']' -f1 <<< "$said" | sort | uniq -d)" = "" ] || fail "$scenario: a rank spoke twice: $said"
  [ "$secs" -lt 30 ] || fail "$scenario: took $secs s"
  echo "$scenario: ended in ${secs} s with status $rc: $(head -1 <<< "$said")"
}

# The patterns below are fixed text but for the escaped ( ) . and the reporting rank's place.
expect_timeout 2 p2p "comm timeout after 2 s: send of 1048576 f32 to peer 1 \(world rank 1\), tag 5 on group 'world' \(rank 0 of 2, world ranks 0,1\) did not finish \(a peer never posted its matching call, is stuck, or died\)"
# Ranks 0-2 each time out and hold the roll call; only the rank that skipped the call is missing.
expect_timeout 4 collective "comm timeout after 2 s: all_reduce \(sum\) of 1024 f32 on group 'tp' \(rank [0-2] of 4, world ranks 0,1,2,3\) did not finish \(a peer never posted its matching call, is stuck, or died\); roll call over 1 s: no answer from member 3 \(world rank 3\)"
expect_timeout 3 node_sum "shared-memory sum over group 'tp' \(rank 0 of 3, world ranks 0,1,2\): peer 2 \(world rank 2\) has not posted region 0 of round 1 after 2 s \(stuck or dead\)"
expect_timeout 3 node_all_reduce "shared-memory all-reduce over group 'tp' \(rank 0 of 3, world ranks 0,1,2\): peer 2 \(world rank 2\) has not posted round 1 after 2 s \(stuck or dead\)"
# A rank that fails mid-step ends the job with its own error, at once: the destructors its
# exception unwinds through neither wait for a receive nor free windows collectively (both would
# wait for peers that wait for it; the timeouts here are 40 s, longer than the job may take).
expect_timeout 3 unwind_work "caught: rank 0 failed mid-step" 40
expect_timeout 3 unwind_windows "caught: rank 0 failed mid-step" 40
echo "comm_timeout_test: 6 passed, 0 failed"
