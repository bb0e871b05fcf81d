#!/usr/bin/env bash
# Every speed target for training, torch.compile and PyTorch's default settings, measured in one
# pass of two device calls. Each part builds every unit, then runs two streams of steps; on a
# machine with two GPUs they run side by side, one per GPU, else one after the other. Every
# ratio is original / patched within one process.
#   PART=1: the layer suite. Stream A: the forward table with autotune (layers.py) and without
#     (--no-autotune, PyTorch's default). Stream B: forward + backward per layer in every
#     training mode (train.py --layers all --control: with an A/A control), then the GPU tests
#     of the training and compile paths. The rows whose plan is PyTorch's (variant aten: its
#     armed C++ path, as users run it; a forced variant would skip that path) print with the
#     tables.
#   PART=2: the example models at PyTorch's defaults. Stream A: eval, eager and compiled
#     (models.py --no-benchmark --control, one model per process; Mask R-CNN eager). Stream B:
#     the training step, eager and compiled (train.py --layers none --control, one model per
#     process).
#   EVAL_MODELS and TRAIN_MODELS (comma-separated) narrow the models; MASK_RCNN= leaves it out.
# Logs in $OUT/logs.tgz; the tables print last.
#   PART=1 BUDGET=560 bash benchmarks/device_targets.sh
#   PART=2 EVAL_MODELS=dcgan,unet TRAIN_MODELS=dcgan MASK_RCNN= bash benchmarks/device_targets.sh
CACHE_NAME=targets_cache source "$(dirname "$0")/device_env.sh"
BUDGET=${BUDGET:-570}
PART=${PART:-1}
EVAL_MODELS=${EVAL_MODELS:-dcgan,pix2pix,unet,fsrcnn,cyclegan,simple_baseline}
TRAIN_MODELS=${TRAIN_MODELS:-dcgan,unet,pix2pix,fsrcnn,cyclegan,simple_baseline}
step() { echo "== $1 ($(date +%T), $(left) s left)"; }
# cap MAX RESERVE: MAX seconds, or what is left once RESERVE seconds are kept for later steps.
cap() {
  local l=$(( $(left) - $2 ))
  if [ "$l" -lt "$1" ]; then echo $(( l > 5 ? l : 5 )); else echo "$1"; fi
}
# timed NAME MAX RESERVE COMMAND...: one step's output in $L/NAME.log, errors in NAME.err.
timed() {
  local name=$1 limit; limit=$(cap "$2" "$3"); shift 3
  step "$name (up to ${limit}s)"
  timeout "$limit" "$@" > "$L/$name.log" 2> "$L/$name.err"; echo "$name: exit $?"
}

step env
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee "$L/env.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$L/env.txt"
gpus=$(nvidia-smi -L | wc -l)

step "build every unit"
python3 -c "from deconv_patch.kernels.extension import load_units, unit_names
load_units(unit_names())" > "$L/build.log" 2>&1 || tail -20 "$L/build.log"

part1_a() {
  timed layers_autotune 260 "$1" python3 benchmarks/layers.py --modes tf32,fp32,bf16,fp16 \
    --reps 20 --json "$L/layers_autotune.json"
  timed layers_untimed 170 "$1" python3 benchmarks/layers.py --no-autotune --reps 20 \
    --modes tf32,fp32,bf16,fp16 --json "$L/layers_untimed.json"
}
part1_b() {
  timed train_layers 240 "$1" python3 benchmarks/train.py --models "" --layers all \
    --modes tf32,bf16,fp32 --no-compile --control --out "$L/train_layers.json"
  local workers=()
  python3 -c "import xdist" 2>/dev/null && workers=(-n 2)
  timed gpu_tests 280 "$1" python3 -m pytest -q -m cuda -p no:cacheprovider "${workers[@]}" \
    tests/gpu/test_mma_backward.py tests/gpu/test_direct_backward.py \
    tests/gpu/test_grad_calls.py tests/gpu/test_deterministic.py \
    tests/gpu/test_few_output_channel_layers.py tests/gpu/test_compile_follows_eager.py \
    tests/gpu/test_cuda_graphs.py tests/gpu/test_fast_path.py
}
part2_a() {
  local m
  for m in ${EVAL_MODELS//,/ }; do
    timed "models_$m" 150 "$1" python3 benchmarks/models.py --models "$m" --no-benchmark \
      --rounds 2 --control --out "$L/models_$m.json"
  done
  [ -n "${MASK_RCNN-1}" ] && timed models_mask_rcnn 120 "$1" python3 benchmarks/models.py \
    --models mask_rcnn --dtypes fp32 --no-benchmark --no-compile --control \
    --out "$L/models_mask_rcnn.json"
}
part2_b() {
  local m
  for m in ${TRAIN_MODELS//,/ }; do
    timed "train_$m" 150 "$1" python3 benchmarks/train.py --models "$m" --layers none \
      --modes tf32,bf16 --control --rounds 3 --out "$L/train_$m.json"
  done
}

if [ "$gpus" -ge 2 ]; then
  (export CUDA_VISIBLE_DEVICES=0; "part${PART}_a" 10) > "$L/stream_a.txt" 2>&1 &
  (export CUDA_VISIBLE_DEVICES=1; "part${PART}_b" 10) > "$L/stream_b.txt" 2>&1 &
  wait
else  # one GPU: stream A keeps half of what is left for stream B
  "part${PART}_a" $(( $(left) / 2 )) > "$L/stream_a.txt" 2>&1
  "part${PART}_b" 10 > "$L/stream_b.txt" 2>&1
fi
cat "$L/stream_a.txt" "$L/stream_b.txt"

step summary
for f in "$L"/*.log; do
  name=$(basename "$f" .log)
  case $name in
    layers_*) echo "-- $name"; grep -E "geomean|slowest" "$f"
      echo "   rows planned on PyTorch's path:"; grep -E " aten +$" "$f" | head -30 ;;
    train_*) echo "-- $name"
      sed -n '/^kind/,$p' "$f" | grep -vE "^layer .* (grad_input|grad_weight) " ;;
    models_*) echo "-- $name"; grep -E "^ *[a-z0-9_]+ +(fp32|bf16) |^note" "$f" ;;
    gpu_tests) echo "-- $name"; grep -E "passed|failed|^FAILED|^ERROR" "$f" | tail -12 ;;
  esac
done
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
