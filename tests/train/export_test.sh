#!/usr/bin/env bash
# merak_export: a checkpoint written by a dp 1 x pp 2 x tp 2 job exported whole under Merak's
# and GPT-2's names (the same weights); PyTorch (/usr/bin/python3) loads the GPT-2-named file
# into its GPT and gets Merak's logits within 1e-5. The way back: weights PyTorch initialised
# and saved under GPT-2's names give Merak PyTorch's logits within 1e-5, and model.init_from
# starts runs from them in other layouts; bad input is one line and exit 2.
set -u
train="$1"
export_bin="$2"
configs="$3"
check="$4"
logits="$5"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
export OMPI_MCA_btl=self,vader
out=$(timeout $((120 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np 4 "$train" \
      --config "$configs/gpt-tiny.yaml" --set parallel.pp=2 --set parallel.tp=2 \
      --set train.micro_batch=4 --set train.steps=2 --set checkpoint.dir="$tmp/ck" 2>&1) ||
  fail "training: $out"
for names in merak hf-gpt2; do
  out=$("$export_bin" --checkpoint "$tmp/ck" -o "$tmp/$names.safetensors" --names "$names" 2>&1) ||
    fail "export ($names): $out"
  grep -q "^merak_export: 52 tensors (0.83M parameters) of step 2 " <<< "$out" ||
    fail "export ($names): $out"
done
dims=(4 128 4 64 256)  # gpt-tiny: layers hidden heads max_seq vocab
/usr/bin/python3 "$check" prepare "$tmp/merak.safetensors" "$tmp/hf-gpt2.safetensors" "$tmp" \
  "${dims[@]}" || fail "the PyTorch side"
"$logits" "$tmp/hf-gpt2.safetensors" "$tmp/tokens.safetensors" "$tmp/merak_logits.safetensors" \
  "${dims[@]}" || fail "Merak's logits on the export"
/usr/bin/python3 "$check" compare "$tmp/merak_logits.safetensors" "$tmp/export_logits.safetensors" \
  "exported weights" || fail "the exported weights' logits"
"$logits" "$tmp/torch_gpt2.safetensors" "$tmp/tokens.safetensors" "$tmp/back_logits.safetensors" \
  "${dims[@]}" || fail "Merak's logits on PyTorch's weights"
/usr/bin/python3 "$check" compare "$tmp/back_logits.safetensors" "$tmp/torch_logits.safetensors" \
  "PyTorch-written weights" || fail "PyTorch-written weights' logits"

# model.init_from: Merak's export under either naming gives the same first loss (bit for bit),
# not the freshly initialised model's; PyTorch's weights start runs in one process and at
# dp 2 x tp 2 with the same first loss (within 1e-5).
loss1() { sed -n 's/.*"step": 1, "loss": \([^,]*\),.*/\1/p' "$1"; }
run1() {  # run1 NAME WEIGHTS: one step in one process from WEIGHTS
  "$train" --config "$configs/gpt-tiny.yaml" --set train.steps=1 --metrics "$tmp/$1.jsonl" \
    --set model.init_from="$2" > "$tmp/$1.log" 2>&1 ||
    fail "init_from ($1): $(tail -2 "$tmp/$1.log")"
}
run1 init-merak "$tmp/merak.safetensors"
run1 init-hf-gpt2 "$tmp/hf-gpt2.safetensors"
run1 init-torch "$tmp/torch_gpt2.safetensors"
"$train" --config "$configs/gpt-tiny.yaml" --set train.steps=1 --metrics "$tmp/fresh.jsonl" \
  > /dev/null 2>&1 || fail "fresh run"
timeout $((120 * ${MERAK_TEST_TIMEOUT_SCALE:-1})) mpirun --allow-run-as-root --oversubscribe -np 4 "$train" \
  --config "$configs/gpt-tiny.yaml" --set parallel.dp=2 --set parallel.tp=2 --set train.steps=1 \
  --set model.init_from="$tmp/torch_gpt2.safetensors" --metrics "$tmp/init3d.jsonl" \
  > "$tmp/init3d.log" 2>&1 || fail "init_from at dp 2 x tp 2: $(tail -2 "$tmp/init3d.log")"
a=$(loss1 "$tmp/init-merak.jsonl") b=$(loss1 "$tmp/init-hf-gpt2.jsonl")
t=$(loss1 "$tmp/init-torch.jsonl") c=$(loss1 "$tmp/init3d.jsonl") f=$(loss1 "$tmp/fresh.jsonl")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "init_from: Merak's names give $a, GPT-2's $b"
[ "$a" != "$f" ] && [ "$t" != "$f" ] ||
  fail "init_from: the fresh model's loss $f: nothing was loaded"
awk -v a="$t" -v c="$c" 'BEGIN {d = (a - c) / a; if (d < 0) d = -d; exit !(d <= 1e-5)}' ||
  fail "init_from PyTorch's weights: (1,1,1) loss $t, (2,1,2) $c"
echo "init_from: first loss $a from the export under both namings; $t from PyTorch's weights," \
  "$c at dp 2 x tp 2 (fresh: $f)"
# Each run says where it started from, and a file whose every tensor it used draws no warning
# (GPT-2's attention mask buffers in PyTorch's file are not weights).
for name in init-merak init-hf-gpt2 init-torch; do
  grep -q "initialised from $tmp/.*\.safetensors (52 parameters)" "$tmp/$name.log" ||
    fail "init_from ($name): no line saying so: $(cat "$tmp/$name.log")"
  ! grep -q "left unused" "$tmp/$name.log" || fail "init_from ($name): $(cat "$tmp/$name.log")"
done
# Weights of a larger model (4 layers into 2): the run starts, warning about the 24 tensors of
# layers 2 and 3 it leaves unused.
out=$("$train" --config "$configs/gpt-tiny.yaml" --set model.layers=2 --set train.steps=1 \
      --set model.init_from="$tmp/merak.safetensors" 2>&1); rc=$?
[ "$rc" -eq 0 ] && grep -q "^warning: model.init_from: $tmp/merak.safetensors holds 24 tensors this model does not have, left unused (blocks.2.attn.proj.bias, " \
  <<< "$out" || fail "init_from of a larger model: exit $rc: $out"
out=$("$train" --config "$configs/gpt-tiny.yaml" --set model.hidden=64 --set model.heads=2 \
      --set model.init_from="$tmp/merak.safetensors" 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "key 'model.init_from': .*has shape \[256, 128\] there, \[256, 64\] here" \
  <<< "$out" || fail "init_from of another model: exit $rc: $out"

out=$("$export_bin" --checkpoint "$tmp/nothing" -o "$tmp/x.safetensors" 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -qF "checkpoint '$tmp/nothing': does not exist" <<< "$out" ||
  fail "no checkpoint: exit $rc: $out"
out=$("$export_bin" --checkpoint "$tmp/ck" -o "$tmp/x.safetensors" --names llama 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "must be merak or hf-gpt2" <<< "$out" || fail "bad --names: $out"
echo "export_test: all checks passed"
