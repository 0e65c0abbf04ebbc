#!/usr/bin/env bash
# Real data through merak_train:
#   - text tokenized by merak_tokenize with GPT-2's BPE into a Megatron .bin/.idx trains
#     (data.source: megatron), the loss falling;
#   - weighted Megatron prefixes ([w, a, w, b]) train; a malformed weight list is an exit-2
#     config error naming data.files;
#   - a truncated index ends the run with exit 2 naming the file and the byte offset; so do a
#     token shard (ours or llm.c's) truncated or with the wrong magic, and a token id not below
#     model.vocab (the file, the byte, the id, the vocabulary), also when a later batch is the
#     first to read it;
#   - data.source: text with data.tokenizer: gpt2 tokenizes the files in merak_train itself and
#     gives the first step the same loss as the Megatron file of the same text.
set -u
train="$1"
tokenize="$2"
configs="$3"
vocab="$4"
merges="$5"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
export MERAK_NUM_THREADS=1

# Two small "books": English-like sentences with numbers and punctuation.
for n in 1 2; do
  for i in $(seq 300); do
    echo "Chapter $n, line $i: the river runs past the mill, and the miller counts $((i * 7 % 97)) sacks."
  done > "$tmp/book$n.txt"
done
bpe=(--tokenizer gpt2 --vocab "$vocab" --merges "$merges")
"$tokenize" "${bpe[@]}" --format megatron -o "$tmp/books" "$tmp/book1.txt" "$tmp/book2.txt" \
  > "$tmp/tok.log" 2>&1 || fail "merak_tokenize megatron: $(cat "$tmp/tok.log")"
"$tokenize" "${bpe[@]}" --format megatron -o "$tmp/book2only" "$tmp/book2.txt" \
  > "$tmp/tok3.log" 2>&1 || fail "merak_tokenize book2: $(cat "$tmp/tok3.log")"

gpt2=(--config "$configs/gpt-tiny.yaml" --set model.vocab=50304 --set model.layers=2
      --set train.seq_len=32 --set train.batch=8 --set train.log_interval=100
      --set data.vocab="$vocab" --set data.merges="$merges")
first_loss() { sed -n 's/.*"step": 1, "loss": \([^,]*\),.*/\1/p' "$1"; }
run() {  # name args...
  local name="$1"; shift
  "$train" "${gpt2[@]}" --metrics "$tmp/$name.jsonl" "$@" > "$tmp/$name.log" 2>&1 ||
    fail "$name: exit $?: $(tail -3 "$tmp/$name.log")"
}
run megatron --set data.source=megatron --set "data.files=[$tmp/books]" --set train.steps=30
run text --set data.source=text --set data.tokenizer=gpt2 \
  --set "data.files=[$tmp/book1.txt, $tmp/book2.txt]" --set train.steps=1
a=$(first_loss "$tmp/megatron.jsonl"); c=$(first_loss "$tmp/text.jsonl")
[ -n "$a" ] || fail "no first loss: $(tail -3 "$tmp/megatron.log")"
# The tool's Megatron file ends each document with <|endoftext|>; merak_train's text source
# puts one after each file: the same tokens, so the same batches.
[ "$a" = "$c" ] || fail "data.source text (gpt2) first loss $c, the Megatron file's $a"
last=$(sed -n 's/.*"step": 30, "loss": \([^,]*\),.*/\1/p' "$tmp/megatron.jsonl")
awk -v a="$a" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' ||
  fail "the loss did not fall on Megatron data: $a -> $last"
echo "megatron data trains: loss $a -> $last over 30 steps; the text source (gpt2) agrees"

run blend --set data.source=megatron --set "data.files=[0.3, $tmp/books, 0.7, $tmp/book2only]" \
  --set train.steps=3
echo "weighted prefixes train: $(sed -n 's/.*"step": 3, "loss": \([^,]*\),.*/\1/p' "$tmp/blend.jsonl")"
"$train" "${gpt2[@]}" --set data.source=megatron --set "data.files=[0.3, $tmp/books, 0.7]" \
  > "$tmp/badw.log" 2>&1
code=$?
[ "$code" -eq 2 ] && grep -q "data.files" "$tmp/badw.log" ||
  fail "a weight without its prefix: exit $code: $(cat "$tmp/badw.log")"
# A damaged index: exit 2 before training, naming the file and the byte offset.
cp "$tmp/books.bin" "$tmp/cut.bin"
head -c 30 "$tmp/books.idx" > "$tmp/cut.idx"
"$train" "${gpt2[@]}" --set data.source=megatron --set "data.files=[$tmp/cut]" \
  > "$tmp/cut.log" 2>&1
code=$?
[ "$code" -eq 2 ] && grep -q "cut.idx: byte [0-9]*: " "$tmp/cut.log" ||
  fail "a truncated index: exit $code: $(cat "$tmp/cut.log")"
echo "truncated index: $(head -1 "$tmp/cut.log")"

# Refused before training: exit 2 and exactly one line, which holds `want` (a regex).
refused() {  # name want args...
  local name="$1" want="$2"; shift 2
  "$train" "${gpt2[@]}" "$@" > "$tmp/$name.log" 2>&1
  local code=$?
  [ "$code" -eq 2 ] || fail "$name: exit $code, want 2: $(cat "$tmp/$name.log")"
  [ "$(wc -l < "$tmp/$name.log")" -eq 1 ] || fail "$name: want one line: $(cat "$tmp/$name.log")"
  grep -qE "$want" "$tmp/$name.log" || fail "$name: want /$want/ in: $(cat "$tmp/$name.log")"
  echo "refused: $name: $(cat "$tmp/$name.log")"
}
for format in merak llmc; do
  "$tokenize" "${bpe[@]}" --format "$format" -o "$tmp/book1.$format" "$tmp/book1.txt" \
    > "$tmp/tok-$format.log" 2>&1 || fail "merak_tokenize $format: $(cat "$tmp/tok-$format.log")"
  size=$(stat -c %s "$tmp/book1.$format")
  head -c $((size - 3)) "$tmp/book1.$format" > "$tmp/cut.$format"
  refused "truncated-$format" "cut\.$format: truncated: header says [0-9]+ tokens, file holds" \
    --set data.source=tokens --set "data.files=[$tmp/cut.$format]"
done
{ printf 'MERAKTOX'; tail -c +9 "$tmp/book1.merak"; } > "$tmp/magic.merak"
# A file that is not there is named with the key that lists it.
refused missing-shard "gpt-tiny\.yaml: key 'data\.files': .*nope\.merak: cannot open" \
  --set data.source=tokens --set "data.files=[$tmp/nope.merak]"
refused missing-valid "gpt-tiny\.yaml: key 'data\.valid': .*nope\.txt: cannot" \
  --set data.source=text --set "data.files=[$tmp/book1.txt]" --set "data.valid=[$tmp/nope.txt]" \
  --set eval.every=5
refused missing-valid-gpt2 "gpt-tiny\.yaml: key 'data\.valid': .*nope\.txt: cannot read" \
  --set data.source=text --set data.tokenizer=gpt2 --set "data.files=[$tmp/book1.txt]" \
  --set "data.valid=[$tmp/nope.txt]" --set eval.every=5
mkdir -p "$tmp/adir"
refused directory "gpt-tiny\.yaml: key 'data\.files': .*adir is a directory, not a file" \
  --set data.source=text --set "data.files=[$tmp/adir]"
refused wrong-magic "magic\.merak: not a token shard: unknown magic \(first bytes 4d4552414b544f58" \
  --set data.source=tokens --set "data.files=[$tmp/magic.merak]"
# GPT-2's BPE gives most English words ids in the thousands: a vocabulary of 1000 is too small.
refused id-over-vocab "book1\.merak: byte [0-9]+: token id [0-9]{4,5} is not below the vocabulary of 1000 \(model\.vocab in .*gpt-tiny\.yaml\)" \
  --set data.source=tokens --set "data.files=[$tmp/book1.merak]" --set model.vocab=1000
refused gpt2-text-small-vocab "key 'model\.vocab': 1000 is smaller than the 50257 ids of GPT-2's tokenizer" \
  --set data.source=text --set data.tokenizer=gpt2 --set "data.files=[$tmp/book1.txt]" \
  --set model.vocab=1000
refused id-over-vocab-megatron "books\.bin: byte [0-9]+: token id [0-9]{4,5} is not below the vocabulary of 1000" \
  --set data.source=megatron --set "data.files=[$tmp/books]" --set model.vocab=1000

# A bad id that only a later batch reads (files are not scanned up front) ends the run there,
# with exit 2 and the file and byte as before training, the steps before it kept.
{ for i in $(seq 4000); do echo "line $i of plain ascii text"; done; printf '\351'
  for i in $(seq 4000); do echo "line $i of plain ascii text"; done; } > "$tmp/late.txt"
at=$(grep -boa $'\351' "$tmp/late.txt" | cut -d: -f1)
"$train" --config "$configs/gpt-tiny.yaml" --set data.source=text \
  --set "data.files=[$tmp/book1.txt, $tmp/late.txt]" --set model.vocab=128 \
  --set train.steps=400 --metrics "$tmp/late.jsonl" > "$tmp/late.log" 2>&1
code=$?
[ "$code" -eq 2 ] || fail "a late bad id: exit $code, want 2: $(tail -3 "$tmp/late.log")"
steps=$(wc -l < "$tmp/late.jsonl")
[ "$steps" -ge 1 ] || fail "a late bad id: the test wants it past step 1 (found at the first)"
tail -1 "$tmp/late.log" | grep -qE "^merak_train: .*late\.txt read as bytes: token $at: token id 233 is not below the vocabulary of 128" ||
  fail "a late bad id: want the file and byte $at: $(tail -1 "$tmp/late.log")"
echo "a bad id at step $((steps + 1)): $(tail -1 "$tmp/late.log")"
echo "PASS"
