#!/usr/bin/env bash
# The central test on a machine with several GPUs: GPT-tiny's per-step losses under NCCL layouts
# of 2, 4 and 8 ranks (a GPU each) against the one-process GPU run, 20 steps each, within 1e-5
# relative in f32 (1e-2 in bf16 with --bf16). Layouts that need more GPUs than the machine has
# are reported as not run.
#
#   tools/gpu_equality.sh [--bf16] [--bin DIR]   (DIR holds merak_train; default: builds it)
set -u
cd "$(dirname "$0")/.."
precision=f32 tolerance=1e-5 bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bf16) precision=bf16 tolerance=1e-2 ;;
    --bin) bin="$2"; shift ;;
    *) echo "usage: tools/gpu_equality.sh [--bf16] [--bin DIR]"; exit 2 ;;
  esac
  shift
done
if [ -z "$bin" ]; then
  bazel build --config=ci //tools/train:merak_train || exit 1
  bin=bazel-bin/tools/train
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
echo "gpu_equality: $gpus GPU(s), $precision, tolerance $tolerance"
tmp=$(mktemp -d)
train() {  # name ranks overrides...
  local name="$1" np="$2"; shift 2
  local launch=()
  [ "$np" -gt 0 ] && launch=(timeout 600 mpirun --allow-run-as-root -np "$np")
  "${launch[@]}" "$bin/merak_train" --config configs/gpt-tiny.yaml --set train.steps=20 \
    --set train.device=cuda --set train.precision="$precision" --set train.micro_batch=4 \
    --metrics "$tmp/$name.jsonl" "$@" > "$tmp/$name.log" 2>&1
}
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
train one 0 || { tail -5 "$tmp/one.log"; exit 1; }
status=0
for layout in "2 1 1" "1 2 1" "1 1 2" "2 2 1" "1 2 2" "2 1 2" "2 2 2"; do
  set -- $layout
  n=$(($1 * $2 * $3)) name="dp$1-pp$2-tp$3"
  if [ "$n" -gt "$gpus" ]; then
    printf '%-14s not run: needs %d GPUs\n' "$name" "$n"
    continue
  fi
  if ! train "$name" "$n" --set parallel.dp="$1" --set parallel.pp="$2" --set parallel.tp="$3" \
       --set parallel.comm=nccl; then
    printf '%-14s FAIL: %s\n' "$name" "$(tail -1 "$tmp/$name.log")"; status=1; continue
  fi
  worst=$(paste <(losses "$tmp/one.jsonl") <(losses "$tmp/$name.jsonl") | awk '
    {d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d; n++}
    END {if (n != 20) print "missing"; else printf "%.2e", w}')
  verdict=pass
  [ "$worst" = missing ] || awk -v w="$worst" -v t="$tolerance" 'BEGIN {exit !(w > t)}' &&
    { verdict=FAIL; status=1; }
  printf '%-14s %s: largest per-step loss difference %s on %d GPUs\n' "$name" "$verdict" \
    "$worst" "$n"
done
rm -rf "$tmp"
exit "$status"
