#!/usr/bin/env bash
# One device call for the untimed rule (cudnn.benchmark off, PyTorch's default): build every
# unit, the GPU suite, every candidate of every suite layer (benchmarks/candidates.py), the layer
# table without autotune, with HELD_OUT=<suite> the same two on layers the rule was not read
# from (1 or held-out: layers.py --suite held-out; fresh: layers neither set holds), with
# MODELS=<names> the example models without autotune (eager), the demo generator's host time
# per forward (also on a BEFORE tree when given: another checkout of the package whose cuda/ is
# the same, so it shares the build), then the layer table with autotune in the time left. Each step gets what BUDGET (seconds) leaves.
# Logs and JSON in $OUT/logs.tgz; tables print last.
#   BEFORE=.ab_base/before MODELS=dcgan,pix2pix,unet BUDGET=560 bash benchmarks/device_untimed.sh
CACHE_NAME=untimed_cache source "$(dirname "$0")/device_env.sh"
BUDGET=${BUDGET:-560}
# cap MAX RESERVE: MAX seconds, or what is left once RESERVE seconds are kept for later steps.
cap() {
  local l=$(( $(left) - $2 ))
  if [ "$l" -lt "$1" ]; then echo $(( l > 5 ? l : 5 )); else echo "$1"; fi
}
step() { echo "== $1 ($(date +%T), $(left) s left)"; }
MODES=${MODES:-tf32,bf16,fp16}
CANDIDATE_MODES=${CANDIDATE_MODES:-tf32,fp32,bf16,fp16}

step "build every unit"
python3 -c "from deconv_patch.kernels.extension import load_units, unit_names
load_units(unit_names())" > "$L/build.log" 2>&1 || tail -20 "$L/build.log"

step "GPU tests"
workers=()
python3 -c "import xdist" 2>/dev/null && workers=(-n "${GPU_WORKERS:-4}")
timeout "$(cap "${TESTS_S:-140}" 180)" python3 -m pytest -q -m cuda -p no:cacheprovider \
  "${workers[@]}" ${TESTS:-tests/gpu} > "$L/gpu-tests.log" 2>&1; test_rc=$?

step "candidates.py"
timeout "$(cap 60 140)" python3 benchmarks/candidates.py --modes "$CANDIDATE_MODES" \
  --json "$L/candidates.json" > "$L/candidates.txt" 2>&1; echo "exit $?"

step "layers.py --no-autotune"
timeout "$(cap 120 60)" python3 benchmarks/layers.py --no-autotune --modes "$MODES" \
  --json "$L/layers_untimed.json" > "$L/layers_untimed.txt" 2>&1; echo "exit $?"

if [ -n "${HELD_OUT:-}" ]; then
  held_out=$([ "$HELD_OUT" = 1 ] && echo held-out || echo "$HELD_OUT")  # (1: the held-out set)
  step "$held_out layers: candidates.py, layers.py --no-autotune"
  timeout "$(cap 40 60)" python3 benchmarks/candidates.py --suite "$held_out" \
    --modes "$CANDIDATE_MODES" --json "$L/candidates_held_out.json" \
    > "$L/candidates_held_out.txt" 2>&1; echo "exit $?"
  timeout "$(cap 60 60)" python3 benchmarks/layers.py --suite "$held_out" --no-autotune \
    --modes "$MODES" --json "$L/layers_held_out.json" > "$L/layers_held_out.txt" 2>&1
  echo "exit $?"
fi

if [ -n "${MODELS:-}" ]; then
  step "models.py --no-benchmark --no-compile"
  timeout "$(cap 120 60)" python3 benchmarks/models.py --models "$MODELS" --no-benchmark \
    --no-compile --out "$L/models_untimed.json" > "$L/models_untimed.txt" 2>&1; echo "exit $?"
fi

# (each run optimizes and autotunes the demo generator first: about 25 s before its table)
step "model_host_time.py"
timeout "$(cap 60 60)" python3 benchmarks/model_host_time.py > "$L/host.txt" 2>&1
if [ -n "${BEFORE:-}" ]; then
  (cd "$BEFORE" && PYTHONPATH=$PWD timeout "$(cap 60 0)" python3 benchmarks/model_host_time.py \
    > "$L/host_before.txt" 2>&1)
fi

step "layers.py (autotune)"
timeout "$(cap 200 5)" python3 benchmarks/layers.py --modes "${AUTOTUNE_MODES:-tf32,bf16}" \
  --json "$L/layers_autotune.json" > "$L/layers_autotune.txt" 2>&1; echo "exit $?"

step summary
echo "GPU tests: exit $test_rc, $(tail -1 "$L/gpu-tests.log")"
grep -E "^FAILED|^ERROR" "$L/gpu-tests.log" | head -10
echo "-- candidates (cudnn.benchmark off)"; grep -E "^(==|tf32|fp32|bf16|fp16) " "$L/candidates.txt"
echo "-- layers.py --no-autotune"; sed -n '/== geomean/,$p' "$L/layers_untimed.txt"
echo "-- layers.py (autotune)"; sed -n '/== geomean/,$p' "$L/layers_autotune.txt"
if [ -n "${HELD_OUT:-}" ]; then
  echo "-- $held_out candidates"; grep -E "^(==|tf32|fp32|bf16|fp16) " "$L/candidates_held_out.txt"
  echo "-- $held_out layers.py --no-autotune"; sed -n '/== geomean/,$p' "$L/layers_held_out.txt"
fi
if [ -n "${MODELS:-}" ]; then
  echo "-- models.py --no-benchmark"; tail -15 "$L/models_untimed.txt"
fi
echo "-- demo host time"; cat "$L/host.txt"
if [ -n "${BEFORE:-}" ]; then echo "-- demo host time, $BEFORE"; cat "$L/host_before.txt"; fi
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
