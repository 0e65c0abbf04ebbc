#!/usr/bin/env bash
# Runs parity_dump, then compare.py on its files; then again with one weight perturbed on the
# C++ side, which compare.py must reject (so this test is known to be able to fail).
set -euo pipefail
dir="${TEST_TMPDIR:-$(mktemp -d)}"
py=/usr/bin/python3

mkdir -p "$dir/ok" "$dir/perturbed"
tests/parity/parity_dump "$dir/ok"
"$py" tests/parity/compare.py "$dir/ok"

tests/parity/parity_dump "$dir/perturbed" --perturb
status=0
"$py" tests/parity/compare.py "$dir/perturbed" > "$dir/perturbed.log" 2>&1 || status=$?
for family in gpt bert; do
  if [ "$status" -eq 0 ] || ! grep -q "^\[$family\] FAILED" "$dir/perturbed.log"; then
    cat "$dir/perturbed.log"
    echo "torch_parity_test: a perturbed $family weight went unnoticed" >&2
    exit 1
  fi
done
echo "perturbed run rejected as expected (first failures):"
grep -m 4 -E "FAIL " "$dir/perturbed.log"  # -m: no pipe into head, which pipefail would trip on
