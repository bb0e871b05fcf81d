#!/usr/bin/env bash
# One device call: build the extension, run every GPU test, the layer and model benchmarks and
# the validation reports; a short summary prints last. Logs and JSON/HTML land in $OUT.
#   bash benchmarks/device_run.sh            # everything
#   QUICK=1 bash benchmarks/device_run.sh    # tests + quick layer benchmark only
#   MODELS=0                                 # skip the end-to-end model benchmark
#   PART=1 / PART=2                          # first half (build, tests, forced-variant
#                                            # benchmarks) / second half (the rest), each
#                                            # within one 10-minute device call
set -uo pipefail
OUT=${OUT:-/tmp/deconv_patch_out}
mkdir -p "$OUT/logs"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export DECONV_PATCH_CACHE=${DECONV_PATCH_CACHE:-/tmp/deconv_patch_cache}
L=$OUT/logs
step() { echo "== $1 ($(date +%T))"; }

step env
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
} 2>&1 | tee "$L/env.txt"

step build
python3 -m deconv_patch.cli build 2>&1 | tee "$L/build.log" | tail -3

if [ "${PART:-1}" = 1 ]; then
step "GPU tests"
python3 -m pytest -q -m cuda -p no:cacheprovider -rf tests 2>&1 > "$L/gpu-tests.log"
grep -E "^FAILED|^ERROR" "$L/gpu-tests.log" | head -30; tail -1 "$L/gpu-tests.log"

for v in gemm_phase:128x128 gemm_phase:128x64 gemm_phase:64x64 gemm_phase:128x32 gemm_phase:128x128x64; do
  step "layer benchmark ($v forced)"
  python3 benchmarks/layers.py --quick --variant $v --json "$OUT/layers_${v/:/_}.json" \
    > "$L/layers_${v/:/_}.log" 2>&1
  grep -E "geomean|slowest" "$L/layers_${v/:/_}.log"
done
fi

if [ "${PART:-2}" = 2 ]; then
step "layer benchmark (planner's choice)"
python3 benchmarks/layers.py ${QUICK:+--quick} --json "$OUT/layers.json" > "$L/layers.log" 2>&1
tail -12 "$L/layers.log"
fi

if [ -z "${QUICK:-}" ] && [ "${PART:-2}" = 2 ]; then
  if [ "${MODELS:-1}" = 1 ]; then
    step "model benchmark"
    python3 benchmarks/models.py --out "$OUT/models.json" > "$L/models.log" 2>&1
    tail -25 "$L/models.log"
  fi
  step "validation reports"
  python3 benchmarks/validate_examples.py --models unet,dcgan --dtypes fp32,bf16 --out "$OUT/reports" \
    > "$L/reports.log" 2>&1; echo "validate_examples exit $?"
  step "demo"
  python3 -m deconv_patch.cli demo 2>&1 | tee "$L/demo.log"
  step "CLI session (info, patch with reports, load in a fresh process)"
  bash benchmarks/cli_session.sh /tmp/cli_session > "$L/cli_session.log" 2>&1
  grep -E "^\$|^\(exit|max\||calls:|PASS|FAIL" "$L/cli_session.log"
  mkdir -p "$OUT/reports" && cp /tmp/cli_session/*report* "$OUT/reports/" 2>/dev/null
fi
step summary
[ -f "$L/gpu-tests.log" ] && echo "GPU tests: $(tail -1 "$L/gpu-tests.log")"
[ -f "$L/layers.log" ] && grep -E "geomean|slowest" "$L/layers.log"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs $( [ -d "$OUT/reports" ] && echo reports ) && rm -rf "$L"
[ -d "$OUT/reports" ] && rm -rf "$OUT/reports"
