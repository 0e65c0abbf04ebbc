#!/usr/bin/env bash
# PyTorch 1.13 exports (onnx_models.py) partitioned with tensor parallelism
# found from the graph structure: onnx_tp_check runs each plan in one process against the
# unsplit graph; merak_partition --onnx explains one of them.
set -euo pipefail
check="$1"
tool="$2"
dir="${TEST_TMPDIR:-$(mktemp -d)}/exports"
/usr/bin/python3 tests/partition/onnx_models.py "$dir" >/dev/null 2>&1
"$check" "$dir"
out="$("$tool" --onnx "$dir/gpt17.onnx" --dim batch=2 --dim seq=8 --pp 2 --tp 2 --hardware cpu-local)"
echo "$out"
grep -q "4 regions split (2 attention over heads, 2 MLP)" <<<"$out"
grep -q "vocabulary-parallel 'wte.weight' (embedding + LM head, logits gathered)" <<<"$out"
