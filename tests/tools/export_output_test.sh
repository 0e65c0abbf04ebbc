#!/usr/bin/env bash
# merak_export's -o: never a file of the checkpoint it reads (named directly, through `..` or a
# link), nor its directory's `latest` or other steps, never a directory or a missing one, and a write that fails (a file size limit, as a full
# disk) is one line naming -o and exit 2; the checkpoint's files stay as they were.
set -u
train="$1"
export_bin=$(realpath "$2")  # absolute: the checks run from $tmp
configs="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
MERAK_NUM_THREADS=1 "$train" --config "$configs/gpt-tiny.yaml" --set model.layers=1 \
  --set train.seq_len=16 --set train.batch=2 --set train.steps=2 --set checkpoint.every=1 \
  --set checkpoint.dir="$tmp/ck" > "$tmp/train.log" 2>&1 ||
  fail "training: $(tail -3 "$tmp/train.log")"
step="$tmp/ck/step_000000002"  # the latest, which the export reads
before=$(cat "$tmp/ck/latest" "$tmp"/ck/step_*/* | md5sum)
ln -sf "$step/rank_00000.safetensors" "$tmp/link.safetensors"

# refused WANT OUT: `-o OUT` (from $tmp) exits 2 with one line naming -o and holding WANT.
refused() {
  local want="$1" out="$2" got rc
  got=$(cd "$tmp" && "$export_bin" --checkpoint "$tmp/ck" -o "$out" 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] || fail "-o $out: exit $rc, want 2: $got"
  [ "$(wc -l <<< "$got")" -eq 1 ] || fail "-o $out: want one line: $got"
  grep -qF "merak_export: -o $out: " <<< "$got" && grep -qF "$want" <<< "$got" ||
    fail "-o $out: want '$want' in: $got"
  echo "refused: $got"
}
inside="is inside the checkpoint's step directory $step (it would overwrite the checkpoint)"
refused "$inside" "$step/rank_00000.safetensors"
refused "$inside" "ck/step_000000002/../step_000000002/index.json"
refused "$inside" "link.safetensors"
refused "$inside" "ck/step_000000002/new.safetensors"
refused "(it would overwrite the checkpoint)" "ck/latest"
refused "of the checkpoint directory" "ck/step_000000001/rank_00000.safetensors"
mkdir -p "$tmp/ck/.step_000000003.tmp"  # a save in progress
refused "of the checkpoint directory" "ck/.step_000000003.tmp/rank_00000.safetensors"
refused "is a directory, not a file to write" "$tmp"
refused "no directory '$tmp/missing' to write it in" "$tmp/missing/model.safetensors"
[ "$(cat "$tmp/ck/latest" "$tmp"/ck/step_*/* | md5sum)" = "$before" ] ||
  fail "the checkpoint's files changed"

# A write that fails: a size limit (writes fail with EFBIG, as on a full disk).
got=$(ulimit -f 8; "$export_bin" --checkpoint "$tmp/ck" -o "$tmp/big.safetensors" 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "size limit: exit $rc, want 2: $got"
[ "$(wc -l <<< "$got")" -eq 1 ] || fail "size limit: want one line: $got"
grep -qF "merak_export: -o $tmp/big.safetensors: " <<< "$got" &&
  grep -q "File too large" <<< "$got" || fail "size limit: $got"
echo "refused: $got"

# Beside the checkpoint is fine, and the export reads back the step.
got=$("$export_bin" --checkpoint "$tmp/ck" -o "$tmp/ck/model.safetensors" 2>&1) ||
  fail "export beside the checkpoint: $got"
[ -s "$tmp/ck/model.safetensors" ] || fail "no export written: $got"
echo "export_output_test: all checks passed"
