#!/usr/bin/env bash
# Writes the fuzzer's seed corpus: real PyTorch 1.13 exports (tiny GPT-2-style and BERT-style
# models, opsets 13 to 17, constant folding on and off) made by the importer test's export
# script with /usr/bin/python3 (Debian's python3-torch).
# Usage: tools/fuzz/make_corpus.sh DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
/usr/bin/python3 tests/graph/onnx/onnx_export.py --corpus "$1"
echo "seed corpus: $(ls "$1" | wc -l) exports in $1"
