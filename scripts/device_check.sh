#!/usr/bin/env bash
# Every device check in one run, for the few minutes a GPU or NPU is lent (issue #7).
#
#   OUT=<folder> bash scripts/device_check.sh       # DEVICE=auto|cuda|npu|cpu (default auto), QUICK=1
#
# Writes under $OUT: hardware/<device>.parquet (hardware-check: seeds through graph replay, full-size
# bytes measured against predicted, replay cost per rule), sweep-measured.parquet (a table sweep on
# the device, graph path, measured bytes per configuration), device-tests.log (the tests marked
# cuda / npu), and a log of each step with its wall time. Copy hardware/*.parquet to data/hardware/
# and commit it. A step that fails is logged and the next one still runs; the exit status is that
# of the last failure. QUICK=1 runs the small suite and grid (seconds on a CPU; the test suite runs it).
set -uo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-out/device-check}"
DEVICE="${DEVICE:-auto}"
PY="${PY:-.venv/bin/python}"
mkdir -p "$OUT/hardware"
: >"$OUT/steps.txt"
status=0

step() {  # step NAME COMMAND...: run, log stdout and stderr, time it, remember a failure
    local name=$1; shift
    local start=$SECONDS
    "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc in $((SECONDS - start)) s" | tee -a "$OUT/steps.txt"
    [[ $rc -eq 0 ]] || status=$rc
}

if [[ "${QUICK:-0}" == 1 ]]; then
    check=(--quick); contexts=4096,12289; tests=(tests/test_graph.py)
else
    check=(); contexts=4096,32768,131072,1048576; tests=(tests)
fi
step hardware-check "$PY" -m workbench --device "$DEVICE" hardware-check --out "$OUT/hardware" "${check[@]}"
step sweep-measured "$PY" -m workbench --device "$DEVICE" sweep --no-cache --measure-memory \
    --context-lens "$contexts" --page-sizes 1,64,128 --draft-tokens 0,6,16 --out "$OUT/sweep-measured.parquet"
step device-tests "$PY" -m pytest -q -m "cuda or npu" -p no:cacheprovider "${tests[@]}"
exit $status
