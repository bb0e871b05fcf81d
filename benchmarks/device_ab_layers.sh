#!/usr/bin/env bash
# One device call: the layer table of two trees in the same process environment, for a
# before/after within run-to-run noise. Both trees build every unit at once (deconv-patch
# build, caches of their own), then benchmarks/layers.py --no-autotune runs per mode, the other
# tree first, then this one. Rows as JSON in $OUT (<tag>_<mode>.json); geomeans print last.
#   git archive REV | tar -x -C .ab_base/before     # (an ignored folder; carry it)
#   bash benchmarks/device_ab_layers.sh .ab_base/before
# Settings: MODES (default "tf32 bf16"), BUDGET (seconds for the script, default 560).
set -u
start=$(date +%s)
OTHER=$(cd "${1:?usage: device_ab_layers.sh OTHER_TREE}" && pwd)
HERE=$PWD
OUT=${OUT:-/tmp/deconv_patch_out}
L=$OUT/logs
mkdir -p "$L"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
build() {  # tree cache tag
  (cd "$1" && t0=$(date +%s)
   DECONV_PATCH_CACHE=$2 PYTHONPATH=$1 timeout 420 python3 -m deconv_patch.cli build \
     > "$L/build_$3.log" 2>&1
   echo "build $3: exit $?, $(( $(date +%s) - t0 )) s")
}
build "$OTHER" /tmp/ab_cache_other other &
build "$HERE" /tmp/ab_cache_here here &
wait
layers() {  # tree cache tag mode
  local left=$(( start + ${BUDGET:-560} - $(date +%s) ))
  [ "$left" -lt 30 ] && { echo "no time left for $3 $4"; return; }
  (cd "$1" && DECONV_PATCH_CACHE=$2 PYTHONPATH=$1 timeout "$left" python3 benchmarks/layers.py \
     --no-autotune --modes "$4" --json "$OUT/${3}_$4.json" > "$L/layers_${3}_$4.log" 2>&1
   echo "layers $3 $4: exit $?")
}
for mode in ${MODES:-tf32 bf16}; do
  layers "$OTHER" /tmp/ab_cache_other other "$mode"
  layers "$HERE" /tmp/ab_cache_here here "$mode"
done
for f in "$L"/layers_*.log; do echo "== $(basename "$f")"; grep -E "geomean|slowest" "$f"; done
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
