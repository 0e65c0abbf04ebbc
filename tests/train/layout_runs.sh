# Sourced by the training tests that compare runs across layouts. Expects $train (merak_train),
# $tmp and fail() from the test.

# run_layout NAME LAYOUT ARGS...: merak_train on dp*pp*tp ranks ("d,p,t") with ARGS (the config
# among them), metrics in $tmp/NAME.jsonl, output in $tmp/NAME.log; a failure fails the test.
run_layout() {
  local name="$1" layout="$2"; shift 2
  local d p t
  IFS=, read -r d p t <<< "$layout"
  local n=$((d * p * t)) launch=()
  [ "$n" -gt 1 ] && launch=(timeout $((300 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np "$n")
  "${launch[@]}" "$train" "$@" --set parallel.dp="$d" --set parallel.pp="$p" \
    --set parallel.tp="$t" --metrics "$tmp/$name.jsonl" > "$tmp/$name.log" 2>&1 ||
    fail "$name: exit $?: $(tail -3 "$tmp/$name.log")"
}

# numbers FILE FROM: the steps' "step loss grad_norm" from a metrics file, from step FROM on.
numbers() {
  sed -n 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2 \3/p' "$1" |
    awk -v from="$2" '$1 >= from'
}
