#!/usr/bin/env bash
# A lost rank ends the job with a message, not a hang (ARCHITECTURE.md, invariant 7), for
# merak_train at 8 ranks (gpt-tiny, dp 2 x pp 2 x tp 2), killed or stopped mid-training:
#   - one rank SIGKILLed: every process is gone within 30 s, mpirun's status is non-zero and its
#     output names the lost rank;
#   - one rank SIGSTOPped: the others end within the communicator timeout (parallel.comm_timeout,
#     set short here) plus a margin, one of them naming the group and the silent peer.
# Every wait is bounded and nothing is left behind: the job runs in its own session, whose
# process group (and every rank found) is killed on exit.
set -u
train="$1"
configs="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
export OMPI_MCA_btl=self,vader
export OMPI_MCA_mpi_yield_when_idle=1
export MERAK_NUM_THREADS=1

leader=""      # the job's session leader (a shell around mpirun); its pid is the process group
ranks=()       # the ranks' pids, once found
cleanup() {
  local p
  # Open MPI gives the ranks process groups of their own: each is killed by pid, those found
  # below mpirun now (while they are still its children) and those found before.
  local found=()
  [ -n "$leader" ] && mapfile -t found < <(descendants "$leader")
  ranks+=("${found[@]}")
  for p in "${ranks[@]}"; do kill -CONT "$p" 2> /dev/null; kill -KILL "$p" 2> /dev/null; done
  [ -n "$leader" ] && kill -KILL -- "-$leader" 2> /dev/null
  leader=""
  ranks=()
}
trap cleanup EXIT
trap "exit 143" TERM  # (bazel's timeout): the EXIT trap still cleans up
trap "exit 130" INT
fail() { echo "FAIL: $*"; [ -n "${log:-}" ] && [ -f "$log" ] && tail -40 "$log"; exit 1; }

# The pids of the ranks below $1 (any depth): processes Open MPI gave a world rank.
descendants() {
  local c
  for c in $(pgrep -P "$1"); do
    tr '\0' '\n' < "/proc/$c/environ" 2> /dev/null | grep -q '^OMPI_COMM_WORLD_RANK=' && echo "$c"
    descendants "$c"
  done
}
# The world rank of process $1, from the environment Open MPI gave it.
rank_of() {
  tr '\0' '\n' < "/proc/$1/environ" 2> /dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p'
}
# How many of the pids given still run (a zombie has ended).
alive() {
  local p n=0 state
  for p in "$@"; do
    state=$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$p/status" 2> /dev/null)
    [ -n "$state" ] && [ "$state" != Z ] && n=$((n + 1))
  done
  echo "$n"
}

# start NAME ARGS...: an 8-rank job in the background, in its own session; waits (up to 120 s)
# until step 2 is in its metrics, then sets `ranks` (indexed by world rank) and `log`.
start() {
  local name="$1"; shift
  log="$tmp/$name.log"
  rcfile="$tmp/$name.rc"
  metrics="$tmp/$name.jsonl"
  rm -f "$log" "$rcfile" "$metrics"
  export LOG="$log" RC="$rcfile"  # for the shell around mpirun
  # shellcheck disable=SC2016  # expanded by the inner shell
  setsid bash -c 'mpirun --allow-run-as-root --oversubscribe -np 8 "$@" > "$LOG" 2>&1
                  echo $? > "$RC"' _ "$train" --config "$configs/gpt-tiny.yaml" \
    --set model.layers=4 --set train.seq_len=32 --set train.log_interval=1 \
    --set train.steps=100000 --set train.micro_batch=2 \
    --set parallel.dp=2 --set parallel.pp=2 --set parallel.tp=2 \
    --metrics "$metrics" "$@" < /dev/null &
  leader=$!
  local deadline=$((SECONDS + 120))
  until grep -q '"step": 2,' "$metrics" 2> /dev/null; do
    [ -f "$rcfile" ] && fail "$name: the job ended before training: status $(cat "$rcfile")"
    [ "$SECONDS" -lt "$deadline" ] || fail "$name: no step 2 after 120 s"
    sleep 0.2
  done
  local p r
  ranks=()
  for p in $(descendants "$leader"); do
    r=$(rank_of "$p")
    [ -n "$r" ] && ranks[r]=$p
  done
  [ "${#ranks[@]}" -eq 8 ] || fail "$name: found ${#ranks[@]} ranks, want 8: ${ranks[*]}"
}

# wait_end SECONDS: waits until mpirun has ended (its status in $rcfile) and no rank runs; sets
# `secs` to the time taken from `t0`. Fails past SECONDS.
wait_end() {
  local limit="$1" deadline=$((SECONDS + $1))
  until [ -f "$rcfile" ] && [ "$(alive "${ranks[@]}")" -eq 0 ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      local left
      left=$(alive "${ranks[@]}")
      fail "the job did not end within $limit s ($left ranks left, mpirun $([ -f "$rcfile" ] &&
        echo ended || echo running))"
    fi
    sleep 0.1
  done
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
}

# 1. SIGKILL one rank (5: not rank 0, in the second replica, on pipeline stage 0).
victim=5
start killed
t0=$(date +%s.%N)
kill -KILL "${ranks[victim]}"
wait_end 30
rc=$(cat "$rcfile")
[ "$rc" -ne 0 ] || fail "killed: mpirun's status is 0"
# Open MPI 4.1 says "mpirun noticed that process rank 5 with PID 0 on node vm exited on signal 9
# (Killed)." (the PID it prints is not the process's).
want="process rank $victim with PID [0-9]+ on node .* exited on signal 9"
grep -qE "$want" "$log" || fail "killed: the output does not name rank $victim ('$want')"
echo "killed rank $victim: the job ended in $secs s, status $rc: $(grep -E "$want" "$log" | head -1)"
cleanup

# 2. SIGSTOP one rank (3: dp 0, pp 1, tp 1) with a 5 s communicator timeout: the other ranks
# end within the timeout plus a margin for the abort, one of them naming a group and world rank
# 3 as the peer it waited for; then the stopped one is killed too.
victim=3
# Longer where everything runs slower (sanitizers): the first steps must not trip it.
timeout_s=$((5 * ${MERAK_TEST_TIMEOUT_SCALE:-1}))
start stopped --set parallel.comm_timeout=$timeout_s
stopped=${ranks[victim]}
t0=$(date +%s.%N)
kill -STOP "$stopped"
others=()
for r in "${!ranks[@]}"; do [ "$r" -eq "$victim" ] || others+=("${ranks[r]}"); done
limit=$((timeout_s + 15))
deadline=$((SECONDS + limit))
until [ "$(alive "${others[@]}")" -eq 0 ]; do
  [ "$SECONDS" -lt "$deadline" ] ||
    fail "stopped: $(alive "${others[@]}") of the other ranks still run after $limit s"
  sleep 0.1
done
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
awk -v s="$secs" -v t="$timeout_s" 'BEGIN {exit !(s >= t)}' ||
  fail "stopped: the others ended in $secs s, before the $timeout_s s timeout: not by it"
kill -CONT "$stopped" 2> /dev/null
kill -KILL "$stopped" 2> /dev/null
ranks=("${others[@]}" "$stopped")
wait_end 15
rc=$(cat "$rcfile")
[ "$rc" -ne 0 ] || fail "stopped: mpirun's status is 0"
# One of the others (the stopped rank, resumed by the abort, may time out too, blaming whoever
# it was waiting for) names a group and world rank 3 as the peer it waited for: "... group 'tp'
# (rank 0 of 2, world ranks 2,3) (shared memory) (peer 1 (world rank 3) has not posted round
# 41) ..." or "... from peer 0 (world rank 3) ... on group 'pp' ...". An MPI collective cannot
# say who is late, so for one the peer is named by the waiting members' roll call ("all_gather
# of 40 i64 on group 'world' (...) did not finish (...); roll call over 2.5 s: no answer from
# member 3 (world rank 3)", when the stop caught rank 3 between its last barrier and the step's
# gather), or is the other member of a group of two, as in "all_reduce (sum) of 16384 f32 on
# group 'tied' (rank 1 of 2, world ranks 3,7)".
others_said=$(grep -E "^merak: \[rank [0-9]+\] " "$log" | grep -vF "merak: [rank $victim]")
named="group '[a-z]+'.*\(world rank $victim\)|\(world rank $victim\).*group '[a-z]+'"
pair="group '[a-z]+' \(rank [01] of 2, world ranks ($victim,[0-9]+|[0-9]+,$victim)\)"
line=$(grep -E "$named" <<< "$others_said" | head -1)
[ -n "$line" ] || line=$(grep -E "$pair" <<< "$others_said" | head -1)
[ -n "$line" ] || fail "stopped: no message naming a group and world rank $victim as the peer"
grep -qF "after $timeout_s s" <<< "$line" || fail "stopped: the message lacks the timeout: $line"
echo "stopped rank $victim: the others ended in $secs s (timeout $timeout_s s), status $rc: $line"
echo "fault_test: all checks passed"
