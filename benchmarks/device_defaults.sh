#!/usr/bin/env bash
# One device call for "never slower at PyTorch's defaults" (cudnn.benchmark off): build every
# unit, then the example models original vs optimize()d, one model per process so that a slow
# model cannot take the others' results with it: eval eager (benchmarks/models.py
# --no-compile), eval under torch.compile (models.py, COMPILED models), and the training step
# eager (benchmarks/train.py --layers none --no-compile, TRAIN models). Each step runs while
# the BUDGET (seconds for the whole script) allows. Logs in $OUT/logs.tgz; the rows print last.
#   EAGER=dcgan,unet COMPILED=dcgan TRAIN=fsrcnn BUDGET=560 bash benchmarks/device_defaults.sh
CACHE_NAME=defaults_check_cache source "$(dirname "$0")/device_env.sh"
BUDGET=${BUDGET:-560}

step env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/env.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$L/env.txt"
step build
python3 -m deconv_patch.cli build > "$L/build.log" 2>&1; tail -1 "$L/build.log"

run() {  # run NAME SECONDS COMMAND...: one model's measurement while the budget allows
  local name=$1 seconds=$2; shift 2
  local budget; budget=$(( $(left) - 10 ))
  if [ "$budget" -lt 30 ]; then echo "skipped $name: budget spent"; return; fi
  [ "$seconds" -gt "$budget" ] && seconds=$budget
  step "$name (up to ${seconds}s)"
  timeout "$seconds" "$@" > "$L/$name.log" 2> "$L/$name.err"; echo "exit $?"
}

IFS=, read -ra eager <<< "${EAGER-dcgan,unet,pix2pix,cyclegan,simple_baseline,fsrcnn,mask_rcnn}"
for m in "${eager[@]}"; do
  run "eager_$m" 120 python3 benchmarks/models.py --models "$m" --no-benchmark --no-compile
done
IFS=, read -ra compiled <<< "${COMPILED-dcgan,pix2pix,fsrcnn}"
for m in "${compiled[@]}"; do
  run "compiled_$m" 240 python3 benchmarks/models.py --models "$m" --no-benchmark --rounds 2
done
IFS=, read -ra train <<< "${TRAIN-pix2pix,cyclegan,simple_baseline,fsrcnn}"
for m in "${train[@]}"; do
  run "train_$m" 150 python3 benchmarks/train.py --models "$m" --layers none --no-compile
done

step summary
echo "-- eval (models.py, cudnn.benchmark off): model dtype eager patched speedup [compiled ...]"
for f in "$L"/eager_*.log "$L"/compiled_*.log; do
  [ -f "$f" ] && grep -E "^ *[a-z0-9_]+ +(fp32|bf16) " "$f" | sed "s/^/$(basename "$f" .log): /"
done
echo "-- training step (train.py, cudnn.benchmark off)"
for f in "$L"/train_*.err; do [ -f "$f" ] && grep '^\[model' "$f"; done
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
