#!/usr/bin/env bash
# Checkpoint speed on this machine's disk, side by side with dd in the same run: GPT-2 124M's
# full training state (f32 parameters and AdamW moments, about 1.5 GB) saved by merak_train
# (one process, CPU) against `dd conv=fsync` writing as many bytes; loaded by --resume against
# dd reading them, page cache dropped before each read when allowed; and the time the step loop
# waits for a background save (checkpoint.async) against the synchronous save. Medians of
# alternating runs.
#
#   tools/bench/checkpoint_bench.sh [DIR] [RUNS]   (DIR on the disk to measure; default /tmp)
set -u
cd "$(dirname "$0")/../.."
dir="${1:-/tmp}/merak_checkpoint_bench"
runs="${2:-3}"
bazel build --config=ci //tools/train:merak_train > /dev/null 2>&1 || exit 1
train=bazel-bin/tools/train/merak_train
args=(--config configs/gpt-small.yaml --set train.device=cpu --set train.precision=f32
      --set train.batch=1 --set train.micro_batch=1 --set train.seq_len=32
      --set parallel.hardware=cpu-local --set train.log_interval=1000)
calc() { awk "BEGIN {print $1}"; }  # arithmetic on decimals
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2> /dev/null && echo dropped || echo kept; }
rm -rf "$dir" && mkdir -p "$dir"

dd_w=() ours_w=() dd_r=() ours_r=() cache=""
for i in $(seq "$runs"); do
  rm -rf "$dir/ck"
  out=$("$train" "${args[@]}" --set train.steps=1 --set checkpoint.dir="$dir/ck" 2>&1)
  line=$(grep '^checkpoint:' <<< "$out") || { echo "$out" | tail -3; exit 1; }
  ours_w+=("$(sed -n 's/.* in \([0-9.]*\) s;.*/\1/p' <<< "$line")")
  bytes=$(du -sb "$dir/ck/step_000000001" | cut -f1)
  blocks=$(( (bytes + (64 << 20) - 1) / (64 << 20) ))
  start=$(date +%s.%N)
  dd if=/dev/zero of="$dir/dd" bs=64M count="$blocks" conv=fsync status=none
  dd_w+=("$(calc "$(date +%s.%N) - $start")")
  cache=$(drop)
  start=$(date +%s.%N)
  dd if="$dir/dd" of=/dev/null bs=64M status=none
  dd_r+=("$(calc "$(date +%s.%N) - $start")")
  rm -f "$dir/dd"
  cache=$(drop)
  out=$("$train" "${args[@]}" --set train.steps=1 --resume "$dir/ck" 2>&1)
  ours_r+=("$(sed -n 's/.*loaded in \([0-9.]*\) s.*/\1/p' <<< "$out")")
done
mb=$(calc "int($bytes / 1000000)")
w_ours=$(printf '%s\n' "${ours_w[@]}" | median); w_dd=$(printf '%s\n' "${dd_w[@]}" | median)
r_ours=$(printf '%s\n' "${ours_r[@]}" | median); r_dd=$(printf '%s\n' "${dd_r[@]}" | median)
printf 'state: %s MB in %s (page cache %s before reads)\n' "$mb" "$dir" "$cache"
printf 'save: merak %.2f s (%.0f MB/s), dd %.2f s (%.0f MB/s): %.0f%% of dd (runs: %s | %s)\n' \
  "$w_ours" "$(calc "$mb / $w_ours")" "$w_dd" "$(calc "$mb / $w_dd")" \
  "$(calc "100 * $w_dd / $w_ours")" "${ours_w[*]}" "${dd_w[*]}"
printf 'load: merak %.2f s (%.0f MB/s), dd %.2f s (%.0f MB/s): %.0f%% of dd (runs: %s | %s)\n' \
  "$r_ours" "$(calc "$mb / $r_ours")" "$r_dd" "$(calc "$mb / $r_dd")" \
  "$(calc "100 * $r_dd / $r_ours")" "${ours_r[*]}" "${dd_r[*]}"

# Background saves every 6 steps: the first (host buffers faulted in) and the second (reused),
# each with 5 steps to finish its files before the next one is due.
rm -rf "$dir/ck"
out=$("$train" "${args[@]}" --set train.steps=18 --set checkpoint.dir="$dir/ck" \
      --set checkpoint.every=6 --set checkpoint.async=true 2>&1)
grep '^checkpoint:' <<< "$out"
waited=$(grep '^checkpoint: .*step_000000012' <<< "$out" | sed -n 's/.*waited \([0-9.]*\) s.*/\1/p')
printf 'async: the step loop waited %s s for the save of step 12, %.1f%% of the synchronous save\n' \
  "$waited" "$(calc "100 * $waited / $w_ours")"
rm -rf "$dir"
