#!/usr/bin/env bash
# accelport's Triton operator library on a GPU: validation, benchmarks against PyTorch, one training step of a
# patched model against PyTorch, tuning, then the benchmarks again with the tuned table. Prepared for a lent GPU.
#
#   benchmarks/gpu_kernels.sh                       # all operators, bf16, device cuda, results in $OUT
#   OPS="gemm flash_attention" benchmarks/gpu_kernels.sh
#   DRY_RUN=1 benchmarks/gpu_kernels.sh             # every step on CPU, tiny shapes, one operator
#
# Time: each step runs under its own limit (timeout, then SIGKILL 5 s later), and no limit reaches
# past BUDGET seconds from the start less a reserve for the summary, so the whole run ends within
# BUDGET + 15 s (default 450 s + 15 s, under 8 minutes) whatever hangs. Validation is budgeted for a cold Triton
# cache: compiling dominates it, Triton compiles in the launching process on one core, so it runs one process per
# operator, JOBS at a time (benchmarks/kernels_validate_parallel.py), and each operator's wall time is in test.json. A step cut short is recorded
# as TIMED OUT; tuning writes its table after each operator, so what it finished is kept and the
# tuned benchmark still runs. A step with no time left is SKIPPED.
#
# Environment: OUT (results folder; default ./gpu-kernels), DEVICE (default cuda), DTYPE (default
# bfloat16), OPS (space-separated operators; default all), CASES (benchmark and tuning matrix:
# small, device or bench; default: the command's own, bench on a GPU), PYTHON (default
# .venv/bin/python if it exists, else python3), MAX_CONFIGS (tuning candidates per case; default 6),
# BUDGET (seconds; default 450), JOBS (validation processes; default min(cores, 8)). Validation covers every
# dtype, the other steps DTYPE. DRY_RUN=1
# sets DEVICE=cpu, DTYPE=float32 (validation too), CASES=small, and MAX_CONFIGS=1 and OPS=swiglu
# unless given: the Triton kernels run under the interpreter.
# Writes to $OUT: steps.txt (one "step exit-code" line each; 124 = timed out, skipped = no time),
# doctor.json, test.json, bench.json, model-step.json (forward + backward step time and peak memory of an
# HF-style Llama-7B-class layer: torch, patch(), enable()), tune.json, tuned.json (the tuned table),
# bench-tuned.json, summary.txt. Exit code: 0 when every step exited 0 (validation passed, every measurable target
# met, tuned entries written), else 1.
set -uo pipefail

if [[ "${DRY_RUN:-0}" == 1 ]]; then
  DEVICE=cpu DTYPE=float32 CASES=small MAX_CONFIGS=${MAX_CONFIGS:-1} OPS=${OPS:-swiglu}
  test_dtypes=(--dtype float32)
else
  test_dtypes=()  # validation on the device covers every dtype of each operator
fi
OUT=${OUT:-gpu-kernels}
DEVICE=${DEVICE:-cuda}
DTYPE=${DTYPE:-bfloat16}
OPS=${OPS:-}
CASES=${CASES:-}
MAX_CONFIGS=${MAX_CONFIGS:-6}
BUDGET=${BUDGET:-450}
cores=$(nproc 2>/dev/null || echo 1)
JOBS=${JOBS:-$((cores < 8 ? cores : 8))}
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
started=$SECONDS
status=0
KILL_AFTER=5
RESERVE=10  # seconds kept for the summary after the last step
cases=()
[[ -n "$CASES" ]] && cases=(--cases "$CASES")

# run SECONDS NAME COMMAND...: one step under min(SECONDS, what the budget has left); its exit
# code is recorded, not fatal.
run() {
  local limit=$1 name=$2
  shift 2
  local left=$((BUDGET - (SECONDS - started) - KILL_AFTER - RESERVE))
  if ((left < limit)); then limit=$left; fi
  if ((limit < 5)); then
    echo "-- $name: SKIPPED, the ${BUDGET}s budget is spent"
    echo "$name skipped" >> "$OUT/steps.txt"
    status=1
    return
  fi
  echo "== $name (limit ${limit}s, $((SECONDS - started))s elapsed)"
  timeout --kill-after="$KILL_AFTER" "$limit" "$@"
  local rc=$?
  case $rc in
    0) echo "-- $name: ok" ;;
    124|137) echo "-- $name: TIMED OUT after ${limit}s"; status=1 ;;
    *) echo "-- $name: exit $rc"; status=1 ;;
  esac
  echo "$name $rc" >> "$OUT/steps.txt"
}

: > "$OUT/steps.txt"
rm -f "$OUT/tuned.json"  # a table from an earlier run must not pass for this one's
# Step limits add up to 495 s, more than the budget leaves: a slow early step takes time from the
# last ones, never from the total.
# shellcheck disable=SC2086  # OPS is a list of words on purpose
run 15  doctor "$PYTHON" -m accelport doctor --format json -o "$OUT/doctor.json"
run 170 test   "$PYTHON" benchmarks/kernels_validate_parallel.py $OPS --device "$DEVICE" "${test_dtypes[@]}" --jobs "$JOBS" \
               -o "$OUT/test.json"
run 75  bench  "$PYTHON" -m accelport kernels bench $OPS --device "$DEVICE" --dtype "$DTYPE" "${cases[@]}" --check-targets \
               --format json -o "$OUT/bench.json"
run 60  model-step "$PYTHON" benchmarks/kernels_model_step.py --device "$DEVICE" --dtype "$DTYPE" -o "$OUT/model-step.json"
run 120 tune   "$PYTHON" -m accelport kernels tune $OPS --device "$DEVICE" --dtype "$DTYPE" "${cases[@]}" \
               --max-configs "$MAX_CONFIGS" --table "$OUT/tuned.json" --format json -o "$OUT/tune.json"
if [[ -f "$OUT/tuned.json" ]]; then
  ACCELPORT_KERNEL_TUNED="$OUT/tuned.json" \
    run 55 bench-tuned "$PYTHON" -m accelport kernels bench $OPS --device "$DEVICE" --dtype "$DTYPE" "${cases[@]}" \
               --check-targets --format json -o "$OUT/bench-tuned.json"
fi

# Summary: one line per target from the tuned benchmark if there is one, else the first.
summary_from="$OUT/bench-tuned.json"
[[ -f "$summary_from" ]] || summary_from="$OUT/bench.json"
timeout "$RESERVE" "$PYTHON" - "$summary_from" "$OUT/test.json" "$OUT/model-step.json" > "$OUT/summary.txt" <<'PY'
import json, sys
bench_path, test_path, step_path = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    test = json.load(open(test_path))
    slowest = max(test.get("ops", {}).items(), key=lambda kv: kv[1]["seconds"], default=None)
    where = f"; slowest operator {slowest[0]} {slowest[1]['seconds']} s in {test['jobs']} processes" if slowest else ""
    print(f"validation: {'passed' if test['passed'] else 'FAILED'} ({test['checks']} checks, {test['failed']} failed{where})")
except (OSError, ValueError, KeyError) as exc:
    print(f"validation: no result ({exc})")
try:
    step = json.load(open(step_path))
    base = step["results"]["torch"]
    mib = lambda r: "-" if r["peak_mib"] is None else f"{r['peak_mib']:.0f} MiB"
    print(f"model step ({step['device']}, {step['dtype']}): torch {base['ms']:.2f} ms, peak {mib(base)}")
    for mode in ("patch", "enable"):
        r = step["results"][mode]
        print(f"  {mode:6} {r['ms']:.2f} ms ({r['speedup_vs_torch']:.2f}x torch), peak {mib(r)}, loss gap {r['loss_gap']:.1e}")
    if "interpreter" in step["note"].lower():
        print(f"  note: {step['note']}")
except (OSError, ValueError, KeyError) as exc:
    print(f"model step: no result ({exc})")
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
    case = f" ({t['case']})" if t.get("case") else ""
    print(f"target {t['op']} {t['measure']} >= {t['threshold']}: {t['value']}{case} {verdict}")
PY
cat "$OUT/summary.txt"
echo "== done in $((SECONDS - started))s; results in $OUT"
exit $status
