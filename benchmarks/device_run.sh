#!/usr/bin/env bash
# One device call: build the extension, run the GPU tests, run the benchmarks, print a summary.
# Usage (device tool): bash benchmarks/device_run.sh [pytest -k expression] ; logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/deconv_patch_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export DECONV_PATCH_CACHE=${DECONV_PATCH_CACHE:-/tmp/deconv_patch_cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv | tee "$OUT/env.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())" | tee -a "$OUT/env.txt"
t0=$(date +%s)
python3 -m deconv_patch.cli build 2>&1 | tee "$OUT/build.log"
echo "build: $(( $(date +%s) - t0 )) s"
KEXPR=${1:-}
python3 -m pytest -q -m cuda ${KEXPR:+-k "$KEXPR"} -p no:cacheprovider --junitxml="$OUT/gpu-tests.xml" \
  tests 2>&1 | tee "$OUT/gpu-tests.log" | tail -40
shift || true
for script in "$@"; do
  echo "== $script"
  python3 $script 2>&1 | tee "$OUT/$(basename ${script%% *} .py).log" | tail -60
done
echo "== summary"
grep -E "^[0-9]+ (passed|failed)|passed|failed" "$OUT/gpu-tests.log" | tail -1
