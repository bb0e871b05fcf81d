#!/usr/bin/env bash
# One device call for training: build every unit at once, the GPU suite (first, so a failure shows
# whatever the timings do), the training benchmark (benchmarks/train.py), and the same benchmark on
# a BEFORE tree when one is given (another checkout of the package, e.g. the commit before a
# change; it shares the build when its cuda/ is the same). Logs and JSON in $OUT/logs.tgz; tables
# print last.
# TRAIN_ARGS: more arguments for train.py (e.g. "--no-compile --kernels-in-training").
# PROFILE=dcgan:tf32,pix2pix:bf16 also runs benchmarks/profile_train.py for those models and
# modes after train.py (its tables print last).
# HOST_LAYERS=dcgan.g3,pix2pix.u6 also runs benchmarks/host_overhead.py --training for those
# layers (HOST_FORMATS, default nchw) after the profiles.
# With CANDIDATES_S=<seconds>, also benchmarks/candidates.py (the untimed rule against every
# candidate, cudnn.benchmark off) last.
#   BEFORE=.ab_base/before MODELS=dcgan,unet WITH_BENCHMARK=1 TESTS=tests/gpu \
#     bash benchmarks/device_train.sh
CACHE_NAME=train_cache source "$(dirname "$0")/device_env.sh"
MODELS=${MODELS:-dcgan,unet}

step "build every unit"
python3 -c "from deconv_patch.kernels.extension import load_units, unit_names; load_units(unit_names())" \
  > "$L/build.log" 2>&1 || tail -20 "$L/build.log"

step "GPU tests"
workers=()
python3 -c "import xdist" 2>/dev/null && workers=(-n "${GPU_WORKERS:-4}")
timeout "${TESTS_S:-150}" python3 -m pytest -q -m cuda -p no:cacheprovider "${workers[@]}" \
  ${TESTS:-tests/gpu} > "$L/gpu-tests.log" 2>&1; test_rc=$?
grep -E "^FAILED|^ERROR" "$L/gpu-tests.log" | head -20

step "train.py"
timeout "${TRAIN_S:-240}" python3 benchmarks/train.py --models "$MODELS" --layers "${LAYERS:-quick}" \
  ${TRAIN_ARGS:-} --out "$L/train.json" > "$L/train.txt" 2> "$L/train.err"; echo "exit $?"

if [ -n "${WITH_BENCHMARK:-}" ]; then
  step "train.py --benchmark"
  timeout "${TRAIN_S:-240}" python3 benchmarks/train.py --models "$MODELS" --layers quick \
    --benchmark --no-compile --out "$L/train_benchmark.json" > "$L/train_benchmark.txt" \
    2> "$L/train_benchmark.err"; echo "exit $?"
fi

profiles=${PROFILE:-}
for spec in ${profiles//,/ }; do
  step "profile_train.py ${spec}"
  timeout "${PROFILE_S:-90}" python3 benchmarks/profile_train.py --model "${spec%%:*}" \
    --mode "${spec##*:}" > "$L/profile_${spec/:/_}.txt" 2> "$L/profile_${spec/:/_}.err"
  echo "exit $?"
done

if [ -n "${HOST_LAYERS:-}" ]; then
  step "host_overhead.py --training"
  timeout "${HOST_S:-90}" python3 benchmarks/host_overhead.py --training --only "$HOST_LAYERS" \
    --formats "${HOST_FORMATS:-nchw}" > "$L/host_training.txt" 2>&1; echo "exit $?"
fi

if [ -n "${BEFORE:-}" ]; then
  step "train.py on $BEFORE"
  (cd "$BEFORE" && PYTHONPATH=$PWD timeout "${BEFORE_S:-120}" python3 benchmarks/train.py \
    --models "$MODELS" --layers quick --no-compile --out "$L/train_before.json" \
    > "$L/train_before.txt" 2> "$L/train_before.err"); echo "exit $?"
fi

if [ -n "${CANDIDATES_S:-}" ]; then
  step "candidates.py (every candidate of every suite layer, cudnn.benchmark off)"
  timeout "$CANDIDATES_S" python3 benchmarks/candidates.py --modes "${CANDIDATE_MODES:-tf32,bf16}" \
    --json "$L/candidates.json" > "$L/candidates.txt" 2> "$L/candidates.err"; echo "exit $?"
fi

step summary
echo "GPU tests: exit $test_rc, $(tail -1 "$L/gpu-tests.log")"
if [ -n "${BEFORE:-}" ]; then echo "-- before:"; cat "$L/train_before.txt"; fi
if [ -n "${WITH_BENCHMARK:-}" ]; then
  echo "-- cudnn.benchmark on:"; cat "$L/train_benchmark.txt"
  grep -v "^\[" "$L/train_benchmark.err" | tail -3
fi
echo "-- cudnn.benchmark off:"
if [ -s "$L/train.txt" ]; then cat "$L/train.txt"; grep -v "^\[" "$L/train.err" | tail -3
else echo "(cut short: the rows measured)"; grep '^\[' "$L/train.err"; fi
if [ -n "${CANDIDATES_S:-}" ]; then
  echo "-- candidates:"; grep -E "^(==|tf32|fp32|bf16|fp16) " "$L/candidates.txt"; tail -3 "$L/candidates.err"
fi
if [ -n "${HOST_LAYERS:-}" ]; then echo "-- host_overhead.py --training:"; cat "$L/host_training.txt"; fi
for spec in ${profiles//,/ }; do
  echo "-- profile ${spec}:"; cat "$L/profile_${spec/:/_}.txt"; tail -3 "$L/profile_${spec/:/_}.err"
done
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
