#!/usr/bin/env bash
# One device call for the build units: what a user's first run compiles at PyTorch's default
# settings (benchmarks/first_use.py, an empty cache of its own), `demo --autotune` on an empty
# cache (the core and the units its layers and autotune's candidates use), `deconv-patch build`
# (every other family), then the GPU test suite (pytest-xdist, GPU_WORKERS processes on the one
# GPU).
# Logs in $OUT/logs.tgz; a short summary prints last.
#   GPU_WORKERS=4 BUDGET=420 bash benchmarks/device_first_use.sh
# BUDGET: seconds for the whole script; the tests get what the steps before them left.
CACHE_NAME=first_use_cache source "$(dirname "$0")/device_env.sh"
rm -rf "$DECONV_PATCH_CACHE" /tmp/deconv_patch_defaults_cache /tmp/deconv_patch_together_cache
seconds() { python3 -c "import time; print(f'{time.time() - $1:.0f}')"; }

step env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/env.txt"
nproc | sed 's/^/cpus /' | tee -a "$L/env.txt"

step "first use at PyTorch's defaults, empty cache"
t0=$(date +%s.%N)
DECONV_PATCH_CACHE=/tmp/deconv_patch_defaults_cache timeout 300 python3 benchmarks/first_use.py \
  > "$L/first_use.log" 2>&1; first_rc=$?
first_use=$(seconds "$t0")
tail -6 "$L/first_use.log"
for log in $(find /tmp/deconv_patch_defaults_cache -name .ninja_log); do
  unit=$(basename "$(dirname "$log")")
  awk -v u="$unit" '!/^#/ {printf "%6.1f s  %s  %s\n", ($2-$1)/1000, u, $4}' "$log"
done | sort -rn > "$L/first_use_compile_times.txt"
head -5 "$L/first_use_compile_times.txt"

step "both dtypes in one compile step (compile_together, as the demo), empty cache"
DECONV_PATCH_CACHE=/tmp/deconv_patch_together_cache timeout 300 python3 benchmarks/first_use.py \
  --together > "$L/first_use_together.log" 2>&1; together_rc=$?
rm -rf /tmp/deconv_patch_together_cache

step "demo --autotune, empty cache"
t0=$(date +%s.%N)
timeout 400 python3 -m deconv_patch.cli demo --autotune > "$L/demo_first.log" 2>&1; demo_rc=$?
demo_first=$(seconds "$t0")
units=$(ls "$DECONV_PATCH_CACHE"/*/ 2>/dev/null | tr '\n' ' ')
grep -E "PASS|FAIL|compiling|result" "$L/demo_first.log" | tail -6

step "demo --autotune again, cached"
t0=$(date +%s.%N)
timeout 200 python3 -m deconv_patch.cli demo --autotune > "$L/demo_cached.log" 2>&1
demo_cached=$(seconds "$t0")

step "build every family"
t0=$(date +%s.%N)
python3 -m deconv_patch.cli build > "$L/build.log" 2>&1; build_rc=$?
build_rest=$(seconds "$t0"); tail -2 "$L/build.log"

step "per-file compile times (ninja logs)"
mkdir -p "$L/ninja"
for log in $(find "$DECONV_PATCH_CACHE" -name .ninja_log); do
  unit=$(basename "$(dirname "$log")")
  cp "$log" "$L/ninja/$unit.ninja_log"
  awk -v u="$unit" '!/^#/ {printf "%6.1f s  %s  %s\n", ($2-$1)/1000, u, $4}' "$log"
done | sort -rn > "$L/compile_times.txt"
head -12 "$L/compile_times.txt"

step "GPU tests"
left=$(( start + ${BUDGET:-600} - $(date +%s) - 20 ))
echo "test budget ${left}s"
workers=()
python3 -c "import xdist" 2>/dev/null && workers=(-n "${GPU_WORKERS:-4}")
timeout "$left" python3 -m pytest -q -m cuda -p no:cacheprovider "${workers[@]}" tests/gpu > "$L/gpu-tests.log" 2>&1; test_rc=$?
grep -E "^FAILED|^ERROR" "$L/gpu-tests.log" | head -20

step summary
echo "first use at the defaults: exit $first_rc, ${first_use}s in all (incl. process start)"
grep -A20 "optimize s" "$L/first_use.log" | tail -8
echo "both dtypes in one step: exit $together_rc"
grep -A20 "optimize s" "$L/first_use_together.log" | grep -v "^ " | tail -5
echo "units built by the demo: $units"
echo "demo exit $demo_rc: ${demo_first}s with an empty cache, ${demo_cached}s cached" \
     "(compile ~ the difference)"
echo "build of the other families: exit $build_rc, ${build_rest}s"
echo "GPU tests: exit $test_rc, $(tail -1 "$L/gpu-tests.log")"
grep -E "speedup|PASS|FAIL" "$L/demo_cached.log" | tail -4
echo "slowest files:"; head -6 "$L/compile_times.txt"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
