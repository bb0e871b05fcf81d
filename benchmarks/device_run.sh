#!/usr/bin/env bash
# One device call: build the extension, run every GPU test, the layer and model benchmarks and
# the validation reports; a short summary prints last. Logs and JSON/HTML land in $OUT.
#   bash benchmarks/device_run.sh            # everything
#   QUICK=1 bash benchmarks/device_run.sh    # tests + quick layer benchmark only
#   MODELS=0                                 # skip the end-to-end model benchmark
#   PART=1 / PART=2                          # first half (build, tests, forced-variant
#                                            # benchmarks) / second half (the rest), each
#                                            # within one 10-minute device call
#   PART=new                                 # build + forced benchmarks of the variants the
#                                            # planner does not pick yet (no tests)
#   SANITIZE=1                               # with PART=1: compute-sanitizer memcheck on a
#                                            # few configs of each new kernel
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
# tests/test_gpu_new_kernels.py first: the paths no device run has checked yet, each under a
# time limit (a hung kernel must not eat the call), the wgmma kernel last and on its own.
python3 -m pytest -q -m cuda -p no:cacheprovider -rf -k "not sm90" tests/test_gpu_new_kernels.py \
  > "$L/gpu-tests-new.log" 2>&1 & wait_for=$!
( sleep 300; kill $wait_for 2>/dev/null && echo "TIMEOUT after 300 s" >> "$L/gpu-tests-new.log" ) &
wait $wait_for; grep -E "^FAILED|^ERROR|TIMEOUT" "$L/gpu-tests-new.log" | head -30
tail -1 "$L/gpu-tests-new.log"
timeout 180 python3 -m pytest -q -m cuda -p no:cacheprovider -rf -k "sm90" tests/test_gpu_new_kernels.py \
  > "$L/gpu-tests-sm90.log" 2>&1 || echo "sm90 tests: exit $? (124 = timed out)"
grep -E "^FAILED|^ERROR" "$L/gpu-tests-sm90.log" | head -30; tail -1 "$L/gpu-tests-sm90.log"
if [ -n "${SANITIZE:-}" ]; then
  step "compute-sanitizer (memcheck) on a few configs of each new kernel"
  ids=$(python3 -m pytest -q --co -p no:cacheprovider tests/test_gpu_new_kernels.py 2>/dev/null \
        | grep "sweep\[" | awk -F'[' '{ if (n[$1]++ < 3) print }')
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -m cuda \
    -p no:cacheprovider $ids > "$L/sanitizer.log" 2>&1; echo "sanitizer exit $?"
  grep -E "ERROR SUMMARY|Invalid|out of bounds" "$L/sanitizer.log" | head -10
fi
python3 -m pytest -q -m cuda -p no:cacheprovider -rf tests --ignore=tests/test_gpu_new_kernels.py \
  2>&1 > "$L/gpu-tests.log"
grep -E "^FAILED|^ERROR" "$L/gpu-tests.log" | head -30; tail -1 "$L/gpu-tests.log"

fi

if [ "${PART:-new}" = new ] || [ "${PART:-1}" = 1 ]; then
# The variants the planner does not pick yet (planner.EXPERIMENTAL) and the 3xTF32 fp32-strict
# mode, each forced on the layers it covers: the numbers that decide whether the planner may.
forced() {  # forced VARIANT MODES FORMATS [ONLY]
  local tag="${1/:/_}_${2//,/-}_${3//,/-}"
  step "layer benchmark ($1 forced; $2; $3)"
  timeout 240 python3 benchmarks/layers.py --variant "$1" --modes "$2" --formats "$3" ${4:+--only "$4"} \
    --json "$OUT/forced_$tag.json" > "$L/forced_$tag.log" 2>&1
  grep -vE "skipped|^layer |TFLOP/s" "$L/forced_$tag.log"
}
kxs_layers="unet.up1,unet.up4,maskrcnn,yolov8seg"
forced gemm_kxs:tap_major tf32,bf16,fp16 nhwc "$kxs_layers"
forced gemm_kxs fp32 nchw,nhwc "$kxs_layers"
forced gemm_kxs:tap_major fp32 nhwc "$kxs_layers"
forced gemm_phase fp32 nchw,nhwc "dcgan.g2,dcgan.g3,pix2pix,simplebl,vae,cyclegan"
forced grouped tf32,bf16 nchw,nhwc "depthwise,grouped,fcn8s"
forced gemm_phase_sm90 bf16,fp16 nchw,nhwc "dcgan,pix2pix,simplebl,vae,cyclegan,dilated,asym"
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
[ -f "$L/gpu-tests-new.log" ] && echo "GPU tests (new kernels): $(tail -1 "$L/gpu-tests-new.log")"
[ -f "$L/gpu-tests-sm90.log" ] && echo "GPU tests (wgmma): $(tail -1 "$L/gpu-tests-sm90.log")"
[ -f "$L/gpu-tests.log" ] && echo "GPU tests: $(tail -1 "$L/gpu-tests.log")"
[ -f "$L/layers.log" ] && grep -E "geomean|slowest" "$L/layers.log"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs $( [ -d "$OUT/reports" ] && echo reports ) && rm -rf "$L"
[ -d "$OUT/reports" ] && rm -rf "$OUT/reports"
