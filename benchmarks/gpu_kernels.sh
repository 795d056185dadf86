#!/usr/bin/env bash
# accelport's Triton operator library on a GPU: validation, benchmarks against PyTorch, tuning,
# then the benchmarks again with the tuned table, all within 8 minutes. Prepared for a lent
# GPU machine; every command it runs is also exercised on CPU by tests/kernels/test_gpu_script.py.
#
#   benchmarks/gpu_kernels.sh                       # all operators, bf16, device cuda, results in $OUT
#   OPS="gemm flash_attention" benchmarks/gpu_kernels.sh
#
# Environment: OUT (results folder; default ./gpu-kernels), DEVICE (default cuda), DTYPE (default
# bfloat16), OPS (space-separated operators; default all), PYTHON (default .venv/bin/python if it
# exists, else python3), MAX_CONFIGS (tuning candidates per case; default 6).
# Writes: doctor.json, test.json, bench.json, tune.json, tuned-<device>.json, bench-tuned.json,
# summary.txt. Exit code: 0 when validation passed and every measurable target was met, else 1.
set -uo pipefail

OUT=${OUT:-gpu-kernels}
DEVICE=${DEVICE:-cuda}
DTYPE=${DTYPE:-bfloat16}
OPS=${OPS:-}
MAX_CONFIGS=${MAX_CONFIGS:-6}
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
started=$SECONDS
status=0

# run SECONDS NAME COMMAND...: one step under a time limit; its exit code is recorded, not fatal.
run() {
  local limit=$1 name=$2
  shift 2
  echo "== $name (limit ${limit}s, $((SECONDS - started))s elapsed)"
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  case $rc in
    0) echo "-- $name: ok" ;;
    124|137) echo "-- $name: TIMED OUT after ${limit}s"; status=1 ;;
    *) echo "-- $name: exit $rc"; status=1 ;;
  esac
  echo "$name $rc" >> "$OUT/steps.txt"
}

: > "$OUT/steps.txt"
# shellcheck disable=SC2086  # OPS is a list of words on purpose
run 15  doctor "$PYTHON" -m accelport doctor --format json -o "$OUT/doctor.json"
run 200 test   "$PYTHON" -m accelport kernels test $OPS --device "$DEVICE" --format json -o "$OUT/test.json"
run 80  bench  "$PYTHON" -m accelport kernels bench $OPS --device "$DEVICE" --dtype "$DTYPE" --check-targets --format json -o "$OUT/bench.json"
run 100 tune   "$PYTHON" -m accelport kernels tune $OPS --device "$DEVICE" --dtype "$DTYPE" --max-configs "$MAX_CONFIGS" \
               --table "$OUT/tuned.json" --format json -o "$OUT/tune.json"
if [[ -f "$OUT/tuned.json" ]]; then
  ACCELPORT_KERNEL_TUNED="$OUT/tuned.json" \
    run 55 bench-tuned "$PYTHON" -m accelport kernels bench $OPS --device "$DEVICE" --dtype "$DTYPE" --check-targets \
               --format json -o "$OUT/bench-tuned.json"
fi

# Summary: one line per target from the tuned benchmark if there is one, else the first.
summary_from="$OUT/bench-tuned.json"
[[ -f "$summary_from" ]] || summary_from="$OUT/bench.json"
"$PYTHON" - "$summary_from" "$OUT/test.json" > "$OUT/summary.txt" <<'PY'
import json, sys
bench_path, test_path = sys.argv[1], sys.argv[2]
try:
    test = json.load(open(test_path))
    print(f"validation: {'passed' if test['passed'] else 'FAILED'} ({test['checks']} checks, {test['failed']} failed)")
except (OSError, ValueError, KeyError) as exc:
    print(f"validation: no result ({exc})")
try:
    bench = json.load(open(bench_path))
except (OSError, ValueError) as exc:
    print(f"benchmarks: no result ({exc})")
    sys.exit(0)
print(f"benchmarks: {bench_path} on {bench['device']}")
for r in bench["results"]:
    frac = "-" if r["fraction_of_peak"] is None else f"{100 * r['fraction_of_peak']:.1f}% of peak"
    print(f"  {r['op']:24} {r['case']:28} {r['achieved']:10.3f} {r['unit']:8} {frac:16} torch {r['torch_achieved']:.3f} ({r['speedup_vs_torch']:.2f}x)")
for t in bench.get("targets", []):
    verdict = "not measurable here" if t["passed"] is None else ("met" if t["passed"] else "MISSED")
    print(f"target {t['op']} {t['measure']} >= {t['threshold']}: {t['value']} {verdict}")
PY
cat "$OUT/summary.txt"
echo "== done in $((SECONDS - started))s; results in $OUT"
exit $status
