# Sourced by the device_*.sh scripts: unset variables are errors, logs go to $OUT/logs ($L),
# the repository is on PYTHONPATH, the build cache is the caller's DECONV_PATCH_CACHE or a
# folder of the script's own (CACHE_NAME), `step` prints a timed heading and `left` the seconds
# the script's BUDGET still allows.
set -u
start=$(date +%s)
OUT=${OUT:-/tmp/deconv_patch_out}
L=$OUT/logs
mkdir -p "$L"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export DECONV_PATCH_CACHE=${DECONV_PATCH_CACHE:-/tmp/deconv_patch_${CACHE_NAME:-cache}}
step() { echo "== $1 ($(date +%T))"; }
left() { echo $(( start + BUDGET - $(date +%s) )); }
