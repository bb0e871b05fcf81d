#!/usr/bin/env bash
# One device call for model patching: build, the GPU tests of optimize() / validate() (the model
# corpus in fp32 and bf16, the examples, validation, the module fast path, the epilogue), the
# demo, the example models eager, and optionally one variant forced on a few suite layers.
# Logs in $OUT; a short summary prints last.
#   EXTRA_TESTS="tests/gpu/grouped/test_grouped_precision.py" MODELS=dcgan,unet,pix2pix \
#   FORCED="grouped|fp32,bf16|nchw,nhwc|depthwise.up,grouped 128" bash benchmarks/device_model_checks.sh
export DECONV_PATCH_CACHE=${DECONV_PATCH_CACHE:-$PWD/.build_cache}
source "$(dirname "$0")/device_env.sh"

step env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/env.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$L/env.txt"
step build
python3 -m deconv_patch.cli build > "$L/build.log" 2>&1; tail -2 "$L/build.log"

step "GPU tests (model patching ${EXTRA_TESTS:+and extra})"
timeout "${TEST_SECONDS:-300}" python3 -m pytest -q -m cuda -p no:cacheprovider \
  tests/gpu/test_model_corpus.py tests/gpu/test_examples.py tests/gpu/test_validation.py \
  tests/gpu/test_fast_path.py tests/gpu/test_epilogue.py ${EXTRA_TESTS:-} \
  > "$L/gpu-tests.log" 2>&1; echo "pytest exit $?"
grep -E "^FAILED|^ERROR" "$L/gpu-tests.log" | head -20
tail -1 "$L/gpu-tests.log"

step demo
timeout 120 python3 -m deconv_patch.cli demo > "$L/demo.log" 2>&1; echo "demo exit $?"
grep -E "PASS|FAIL|declined|result" "$L/demo.log" | tail -6

step "example models, eager"
timeout "${MODEL_SECONDS:-150}" python3 benchmarks/models.py --models "${MODELS:-dcgan,unet,pix2pix}" \
  --no-compile --rounds 3 --out "$OUT/models.json" > "$L/models.log" 2>&1
echo "models exit $?"; grep -E "^ *[a-z0-9_]+ +(fp32|bf16) " "$L/models.log"

if [ -n "${FORCED:-}" ]; then
  IFS='|' read -r v m f only <<< "$FORCED"
  step "layer benchmark ($v forced; $m; $f)"
  timeout 90 python3 benchmarks/layers.py --variant "$v" --modes "$m" --formats "$f" \
    ${only:+--only "$only"} --json "$OUT/forced.json" > "$L/forced.log" 2>&1
  grep -vE "skipped|TFLOP/s|geomean" "$L/forced.log" | tail -20
fi
tar -czf "$OUT/logs.tgz" -C "$OUT" logs
