#!/usr/bin/env bash
# Tied weights end to end: layouts whose time balance alone put GPT's LM head (a reader of the
# tied wte.weight) off the last stage now train, and give the single process's loss and gradient
# norm (1e-5 relative) step by step: one layer over 8 stages; interleaved 4 x 2; interleaved
# 2 x 4, where the head sat on rank 0's own later chunk. Before, the first failed at step 1 and
# the last hung until parallel.comm_timeout.
set -u
train="$1"
configs="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
export OMPI_MCA_btl=self,vader OMPI_MCA_mpi_yield_when_idle=1 MERAK_NUM_THREADS=1
common=(--config "$configs/gpt-tiny.yaml" --set model.layers=1 --set train.seq_len=32
        --set train.steps=3 --set train.log_interval=1 --set train.batch=8
        --set train.threads=1 --set parallel.comm_timeout=30)
run() {  # run NAME NP SETTINGS...: NAME.jsonl
  local name="$1" np="$2" sets=()
  shift 2
  for kv in "$@"; do sets+=(--set "$kv"); done
  local cmd=("$train" "${common[@]}" "${sets[@]}" --metrics "$tmp/$name.jsonl")
  [ "$np" -gt 1 ] && cmd=(mpirun --allow-run-as-root --oversubscribe -np "$np" "${cmd[@]}")
  timeout $((120 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) "${cmd[@]}" > "$tmp/$name.log" 2>&1 ||
    fail "$name ($np ranks): exit $?: $(tail -5 "$tmp/$name.log")"
}
same() {  # same NAME: its losses and norms are the single process's
  /usr/bin/python3 - "$tmp/one.jsonl" "$tmp/$1.jsonl" <<'PY' || fail "$1 differs from one process"
import json, sys
def steps(path):
    return [(d["loss"], d["grad_norm"]) for d in map(json.loads, open(path)) if "grad_norm" in d]
want, got = steps(sys.argv[1]), steps(sys.argv[2])
assert len(want) == 3 and len(got) == 3, (want, got)
for w, g in zip(want, got):
    for a, b in zip(w, g):
        assert abs(a - b) <= 1e-5 * abs(a), (want, got)
PY
  echo "$1: same loss and gradient norm as one process"
}
run one 1 train.micro_batch=1
run pp8 8 parallel.pp=8 train.micro_batch=1
same pp8
run pp4v2 4 parallel.pp=4 parallel.schedule=interleaved parallel.virtual_stages=2 \
  train.micro_batch=1
same pp4v2
run pp2v4 2 parallel.pp=2 parallel.schedule=interleaved parallel.virtual_stages=4 \
  train.micro_batch=2
same pp2v4
