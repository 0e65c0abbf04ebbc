#!/usr/bin/env bash
# Exports the reference models with PyTorch (/usr/bin/python3, Debian's python3-torch), then
# checks the imports against them (tests/graph/onnx/onnx_parity.cc says what is checked).
set -euo pipefail
dir="${TEST_TMPDIR:-$(mktemp -d)}/exports"
/usr/bin/python3 tests/graph/onnx/onnx_export.py "$dir"
tests/graph/onnx/onnx_parity "$dir"
