#!/usr/bin/env bash
# How long the layout search takes (issue 20's targets: under 10 s for every config in configs/
# that leaves its layout to the search, at 64 and 512 ranks on a100-80g and h100-80g; under
# 60 s for the 1T-parameter GPT, configs/gpt1t.yaml, at 3072). The time is the search's own
# line (the winner's plan included), not the process start. A config refused at once (the
# model does not fit, the batch does not divide) is listed as refused.
#
#   bazel run //tools/train:bench_search
set -u
here="${RUNFILES_DIR:-$0.runfiles}/merak"
train="$here/tools/train/merak_train"
over=0
run() {  # run LIMIT CONFIG WORLD HARDWARE
  local out rc secs
  out=$("$train" --config "$2" --dry-run --world "$3" --hardware "$4" 2>&1); rc=$?
  name=$(basename "$2" .yaml)
  if [ "$rc" -eq 2 ]; then
    printf "  %-10s %5s  %-9s  refused: %s\n" "$name" "$3" "$4" "$(tail -1 <<< "$out" | sed "s/^merak_train: [^ ]*\.yaml: //" | cut -c1-90)"
    return
  fi
  secs=$(sed -n 's/^layout search: .* fit; \([0-9.]*\) s$/\1/p' <<< "$out")
  [ -n "$secs" ] || { echo "  $name $3 $4: exit $rc: $(tail -2 <<< "$out")"; over=$((over + 1)); return; }
  local verdict="ok"
  awk -v s="$secs" -v l="$1" 'BEGIN { exit !(s < l) }' || { verdict="OVER ${1} s"; over=$((over + 1)); }
  printf "  %-10s %5s  %-9s  %7.2f s  %-8s %s\n" "$name" "$3" "$4" "$secs" "$verdict" \
    "$(sed -n 's/^chosen: //p' <<< "$out")"
}
echo "  config     world  hardware   search   target   chosen"
for cfg in "$here"/configs/*.yaml; do
  grep -q ': auto$' "$cfg" || continue
  for world in 64 512; do
    for hw in a100-80g h100-80g; do run 10 "$cfg" "$world" "$hw"; done
  done
done
run 60 "$here/configs/gpt1t.yaml" 3072 a100-80g
echo "searches over their target: $over"
