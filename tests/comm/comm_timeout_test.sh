#!/usr/bin/env bash
# A rank that never posts its side of an operation: the job must end within the timeout,
# with a non-zero status and one message naming the operation, group and peer.
set -u
bin="$1"
export OMPI_MCA_btl=self,vader
fail() { echo "FAIL: $*"; exit 1; }

# run NP SCENARIO: sets out, rc and secs (the job gets 2 s; 60 s would mean a hang).
run() {
  local start=$SECONDS
  out=$(timeout 60 mpirun --allow-run-as-root --oversubscribe -np "$1" "$bin" "$2" 2 2>&1)
  rc=$?
  secs=$((SECONDS - start))
}

run 2 p2p
[ "$rc" -ne 124 ] || fail "p2p: the job hung (killed after 60 s): $out"
[ "$rc" -ne 0 ] || fail "p2p: exit status 0: $out"
want="comm timeout after 2 s: send of 1048576 f32 to peer 1 (world rank 1), tag 5 on group 'world' (rank 0 of 2, world ranks 0,1) did not finish"
grep -qF "$want" <<< "$out" || fail "p2p: message lacks \"$want\": $out"
[ "$(grep -c 'comm timeout' <<< "$out")" -eq 1 ] || fail "p2p: want one timeout message: $out"
[ "$secs" -lt 30 ] || fail "p2p: took $secs s"
echo "p2p: ended in ${secs} s with status $rc: $(grep 'comm timeout' <<< "$out")"

run 4 collective
[ "$rc" -ne 124 ] || fail "collective: the job hung (killed after 60 s): $out"
[ "$rc" -ne 0 ] || fail "collective: exit status 0: $out"
want="comm timeout after 2 s: all_reduce (sum) of 1024 f32 on group 'tp' (rank 0 of 4, world ranks 0,1,2,3) did not finish"
grep -qF "$want" <<< "$out" || fail "collective: message lacks \"$want\": $out"
[ "$(grep -c 'comm timeout' <<< "$out")" -eq 1 ] || fail "collective: want one message: $out"
[ "$secs" -lt 30 ] || fail "collective: took $secs s"
echo "collective: ended in ${secs} s with status $rc: $(grep 'comm timeout' <<< "$out")"
run 3 node_sum
[ "$rc" -ne 124 ] || fail "node_sum: the job hung (killed after 60 s): $out"
[ "$rc" -ne 0 ] || fail "node_sum: exit status 0: $out"
want="shared-memory sum over group 'tp' (rank 0 of 3, world ranks 0,1,2): peer 2 (world rank 2) has not posted region 0 of round 1 after 2 s"
grep -qF "$want" <<< "$out" || fail "node_sum: message lacks \"$want\": $out"
[ "$secs" -lt 30 ] || fail "node_sum: took $secs s"
echo "node_sum: ended in ${secs} s with status $rc: $(grep 'shared-memory sum' <<< "$out")"
run 3 node_all_reduce
[ "$rc" -ne 124 ] || fail "node_all_reduce: the job hung (killed after 60 s): $out"
[ "$rc" -ne 0 ] || fail "node_all_reduce: exit status 0: $out"
want="shared-memory all-reduce over group 'tp' (rank 0 of 3, world ranks 0,1,2): peer 2 (world rank 2) has not posted round 1 after 2 s"
grep -qF "$want" <<< "$out" || fail "node_all_reduce: message lacks \"$want\": $out"
[ "$secs" -lt 30 ] || fail "node_all_reduce: took $secs s"
echo "node_all_reduce: ended in ${secs} s with status $rc: $(grep 'shared-memory all-reduce' <<< "$out")"
echo "comm_timeout_test: 4 passed, 0 failed"
