#!/usr/bin/env bash
# merak_export: a checkpoint written by a dp 1 x pp 2 x tp 2 job exported whole under Merak's
# and GPT-2's names; PyTorch (/usr/bin/python3) loads both into its GPT with every name and shape
# matching and gets the same logits; model.init_from starts runs in other layouts from such a
# file (either naming) at exactly its weights; bad input is one line and exit 2.
set -u
train="$1"
export_bin="$2"
configs="$3"
check="$4"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
export OMPI_MCA_btl=self,vader
out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 "$train" \
      --config "$configs/gpt-tiny.yaml" --set parallel.pp=2 --set parallel.tp=2 \
      --set train.micro_batch=4 --set train.steps=2 --set checkpoint.dir="$tmp/ck" 2>&1) ||
  fail "training: $out"
for names in merak hf-gpt2; do
  out=$("$export_bin" --checkpoint "$tmp/ck" -o "$tmp/$names.safetensors" --names "$names" 2>&1) ||
    fail "export ($names): $out"
  grep -q "^merak_export: 52 tensors (0.83M parameters) of step 2 " <<< "$out" ||
    fail "export ($names): $out"
done
/usr/bin/python3 "$check" "$tmp/merak.safetensors" "$tmp/hf-gpt2.safetensors" 4 128 4 64 256 ||
  fail "the PyTorch check"
# The way back: model.init_from. The trained weights, under either naming, in one process and
# at dp 2 x tp 2: the same first loss (bit for bit between the namings, within 1e-5 across the
# layouts), and not the freshly initialised model's.
loss1() { sed -n 's/.*"step": 1, "loss": \([^,]*\),.*/\1/p' "$1"; }
for names in merak hf-gpt2; do
  "$train" --config "$configs/gpt-tiny.yaml" --set train.steps=1 --metrics "$tmp/init-$names.jsonl" \
    --set model.init_from="$tmp/$names.safetensors" > "$tmp/init.log" 2>&1 ||
    fail "init_from ($names): $(tail -2 "$tmp/init.log")"
done
"$train" --config "$configs/gpt-tiny.yaml" --set train.steps=1 --metrics "$tmp/fresh.jsonl" \
  > /dev/null 2>&1 || fail "fresh run"
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 "$train" \
  --config "$configs/gpt-tiny.yaml" --set parallel.dp=2 --set parallel.tp=2 --set train.steps=1 \
  --set model.init_from="$tmp/hf-gpt2.safetensors" --metrics "$tmp/init3d.jsonl" > /dev/null 2>&1 ||
  fail "init_from at dp 2 x tp 2"
a=$(loss1 "$tmp/init-merak.jsonl") b=$(loss1 "$tmp/init-hf-gpt2.jsonl")
c=$(loss1 "$tmp/init3d.jsonl") f=$(loss1 "$tmp/fresh.jsonl")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "init_from: Merak's names give $a, GPT-2's $b"
[ "$a" != "$f" ] || fail "init_from: the fresh model's loss $f: nothing was loaded"
awk -v a="$a" -v c="$c" 'BEGIN {d = (a - c) / a; if (d < 0) d = -d; exit !(d <= 1e-5)}' ||
  fail "init_from: (1,1,1) loss $a, (2,1,2) $c"
echo "init_from: first loss $a under both namings, $c at dp 2 x tp 2 (fresh: $f)"
out=$("$train" --config "$configs/gpt-tiny.yaml" --set model.hidden=64 --set model.heads=2 \
      --set model.init_from="$tmp/merak.safetensors" 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "key 'model.init_from': .*has shape \[256, 128\] there, \[256, 64\] here" \
  <<< "$out" || fail "init_from of another model: exit $rc: $out"

out=$("$export_bin" --checkpoint "$tmp/nothing" -o "$tmp/x.safetensors" 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "neither a step" <<< "$out" || fail "no checkpoint: exit $rc: $out"
out=$("$export_bin" --checkpoint "$tmp/ck" -o "$tmp/x.safetensors" --names llama 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "must be merak or hf-gpt2" <<< "$out" || fail "bad --names: $out"
echo "export_test: all checks passed"
