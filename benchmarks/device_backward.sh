#!/usr/bin/env bash
# One device call for the backward kernels: build every unit, the backward's GPU tests (first, so
# a failure shows whatever the timings do), backward_bounds.py (each gradient, ATen's and the
# direct kernels', against its floor), then train.py with kernels_in_training (our forward and
# the planned backward, per suite layer, and DCGAN's step). Logs in $OUT/logs; tables last.
#   bash benchmarks/device_backward.sh
#   ONLY=depthwise,dcgan.g5 bash benchmarks/device_backward.sh   (layer name prefixes)
CACHE_NAME=backward_cache source "$(dirname "$0")/device_env.sh"
BUDGET=${BUDGET:-570}
ONLY=${ONLY:+--only $ONLY}

step "build every unit"
python3 -m deconv_patch.cli build > "$L/build.log" 2>&1 || tail -20 "$L/build.log"

step "GPU tests"
timeout "${TESTS_S:-150}" python3 -m pytest -q -m cuda -p no:cacheprovider -n 4 \
  tests/gpu/test_direct_backward.py tests/gpu/test_grad_calls.py tests/gpu/test_deterministic.py \
  > "$L/gpu-tests.log" 2>&1
grep -E "^FAILED|^ERROR|passed|failed" "$L/gpu-tests.log" | tail -12

step "backward_bounds.py"
timeout "${BOUNDS_S:-200}" python3 benchmarks/backward_bounds.py --modes tf32,bf16 $ONLY \
  > "$L/bounds.txt" 2> "$L/bounds.err"; echo "exit $?"

step "train.py --kernels-in-training"
timeout $(( $(left) - 15 )) python3 benchmarks/train.py --models dcgan --layers all $ONLY \
  --no-compile --kernels-in-training --out "$L/train.json" > "$L/train.txt" 2> "$L/train.err"
echo "exit $?"

tar -czf "$OUT/logs.tgz" -C "$OUT" logs
grep -A8 "^== per" "$L/bounds.txt"
tail -40 "$L/train.txt"
