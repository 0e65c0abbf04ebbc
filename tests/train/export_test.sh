#!/usr/bin/env bash
# merak_export: a checkpoint written by a dp 1 x pp 2 x tp 2 job exported whole under Merak's
# and GPT-2's names; PyTorch (/usr/bin/python3) loads both into its GPT with every name and shape
# matching and gets the same logits; bad input is one line and exit 2.
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
out=$("$export_bin" --checkpoint "$tmp/nothing" -o "$tmp/x.safetensors" 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "neither a step" <<< "$out" || fail "no checkpoint: exit $rc: $out"
out=$("$export_bin" --checkpoint "$tmp/ck" -o "$tmp/x.safetensors" --names llama 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "must be merak or hf-gpt2" <<< "$out" || fail "bad --names: $out"
echo "export_test: all checks passed"
