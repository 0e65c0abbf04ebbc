#!/usr/bin/env bash
# Kill -9 during a save, then load: the previous complete step comes back, every value intact.
# First at each phase of a save (after the pieces, after the index, after the directory's rename,
# before `latest` moves), then at arbitrary moments of a writer saving in a loop.
set -u
bin="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
for phase in pieces index publish; do
  dir="$tmp/phase-$phase"
  rm -rf "$dir"
  out=$("$bin" write "$dir" --kill-at 3 "$phase" 2>&1)
  grep -q "killing myself after $phase of step 3" <<< "$out" || fail "$phase: $out"
  got=$("$bin" verify "$dir" 2>&1) || fail "after a kill at $phase: $got"
  [ "$got" = "step 2 verified" ] || fail "after a kill at $phase: want step 2, got: $got"
  echo "killed after $phase of step 3: $got"
done
# Arbitrary moments: the writer saves as fast as it can; each kill lands somewhere in a save.
for delay in 0.05 0.13 0.21 0.34 0.55 0.89; do
  dir="$tmp/loop-$delay"
  rm -rf "$dir"
  "$bin" write "$dir" > "$tmp/loop.log" 2>&1 &
  pid=$!
  sleep "$delay"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  last=$(grep -c '^saved ' "$tmp/loop.log")
  if [ "$last" -eq 0 ]; then
    echo "killed after ${delay}s before any save completed"
    continue
  fi
  got=$("$bin" verify "$dir" 2>&1) || fail "killed after ${delay}s (saved $last): $got"
  step=$(sed -n 's/^step \([0-9]*\) verified$/\1/p' <<< "$got")
  # The step `latest` names is the last one reported saved, or the one after it when the kill
  # fell between moving `latest` and printing.
  [ "$step" -eq "$last" ] || [ "$step" -eq $((last + 1)) ] ||
    fail "killed after ${delay}s: last saved $last, loaded $step"
  echo "killed after ${delay}s (saved $last): $got"
done
echo "crash_test: every kill left a loadable previous checkpoint"
