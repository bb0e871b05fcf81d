#!/usr/bin/env bash
# One device call: build the extension, run every GPU test, the layer and model benchmarks and
# the validation reports; a short summary prints last. Logs and JSON/HTML land in $OUT.
#   bash benchmarks/device_run.sh            # everything
#   QUICK=1 bash benchmarks/device_run.sh    # tests + quick layer benchmark only
#   MODELS=0                                 # skip the end-to-end model benchmark
#   PART=1 / PART=2                          # first half (build, 3xTF32 error scan, all GPU
#                                            # tests, optional sanitizer) / second half (the
#                                            # benchmarks and reports), each within one
#                                            # 10-minute device call
#   PART=newtests                            # build, error scan, and only the tests of
#                                            # tap-major gemm_kxs, 3xTF32, the grouped kernel
#                                            # and gemm_phase_sm90 (the newtests list below)
#   PART=new                                 # build + those variants (and 3xTF32) forced on
#                                            # the layers they cover (no tests)
#   PART=kxs_sm90                            # build + gemm_kxs_sm90's tests (a hung config
#                                            # cannot eat the call) + its configs forced on
#                                            # the k == stride layers
#   PART=phase_tma                           # build + gemm_phase_tma's tests per config, its
#                                            # 3xTF32 error scan, gemm_kxs_sm90's tests
#                                            # (SKIP_KXS=1: not)
#   PART=phase_tma_bench                     # build + gemm_phase_tma (planner's config and
#                                            # each config) forced on the k != stride layers
#                                            # in bf16, TF32 and fp32 strict (KXS_NCHW=1:
#                                            # gemm_kxs_sm90's configs forced in NCHW first)
#   PART=strict                              # build + gemm_phase_tma's 3xTF32 tests, error
#                                            # scan, configs forced in fp32 strict, quick table
#   PART=relayout                            # build + the re-layout kernel's test, the sweeps
#                                            # of the kernels that read re-laid input, NCHW rows
#   PART=probe                               # build + host-overhead table + ncu counters of
#                                            # Mask R-CNN's layer (NCHW vs NHWC)
#   PART=area                                # build + gemm_kxs_sm90's kernel-area configs:
#                                            # their tests, each forced on the NCHW k ==
#                                            # stride rows, ncu L2 write sectors of Mask
#                                            # R-CNN's layer, then (time left) the other
#                                            # configs' tests
#   PART=gan_models                          # build + the planner's tests, the k == stride
#                                            # rows (planner's choice, every mode/layout),
#                                            # validate() reports of DCGAN and pix2pix with
#                                            # autotune on, their end-to-end model rows
#   PART=gan_profile                         # build + kernels per patched layer of DCGAN and
#                                            # pix2pix (bf16) in the model, by variant
#   PART=epilogue                            # build + every epilogue sweep, autotune's tests,
#                                            # the GAN profile and models, the TMA kernels'
#                                            # other tests
#   PART=phase_act                           # build + the phase GEMMs' epilogue sweeps (every
#                                            # config x activation), DCGAN / pix2pix layers
#                                            # with them forced (bare vs fused activation),
#                                            # ncu of U-Net up1 TF32 NHWC (tensor pipe vs L2)
#   PART=host                                # build + host / GPU / event time of small layers
#                                            # and the host calls of one call (torch.profiler)
#   PART=fewch                               # build + ncu of fcn8s.up8 (21 channels): cuDNN
#                                            # and the phase GEMMs forced, bf16
#   PART=outtile                             # build + gemm_out_tile's tests, then aten,
#                                            # gemm_out_tile and each of its configs forced on
#                                            # the few-channel layers (fcn8s, dcgan.g5, fsrcnn,
#                                            # keypoint; bf16, fp16, TF32, fp32 strict (3xTF32)
#                                            # or OT_MODES=...; NCHW, NHWC), ncu of
#                                            # fcn8s.up8, fsrcnn, dcgan.g5 bf16 (SKIP_TESTS=1:
#                                            # no tests; OT_VARIANTS="v ...": time only these;
#                                            # SANITIZE=1: memcheck on a few cases;
#                                            # EXTRA_TESTS="...": more GPU tests; SKIP_NCU=1)
#   PART=round                               # build + gemm_kxs_sm90's and gemm_phase_tma's
#                                            # tests, their configs forced in TF32 on their
#                                            # layers (ROUND_KXS / ROUND_PT="variant ..."),
#                                            # the planner's TF32 table (ROUND_TABLE=0: not;
#                                            # SKIP_TESTS=1: no tests; ROUND_FORMATS=nhwc)
#   PART=epi_ncu                             # build + ncu warp-state / source counters of
#                                            # gemm_kxs_sm90 128x256s4 on U-Net up1 (fp32,
#                                            # bf16; EPI_CASES="dtype|variant|layer" lines)
#   PART=ab                                  # build + AB_TESTS (pytest args), AB_FORCED
#                                            # timings ("variant|modes|formats|layers"
#                                            # lines), then the same timings with the files
#                                            # of folder AB_BASE over cuda/ (rebuilt)
#   PART=ffma                                # build + ffma_tile's tests, its heuristic and
#                                            # configs forced on dcgan.g5, fsrcnn, keypoint
#   PART=ffma_ncu                            # build + ncu of ffma_tile (FT_NCU_VARIANTS) on
#                                            # fsrcnn and dcgan.g5, fp32 NCHW
#   PART=col2im                              # build + gemm_col2im's tests, its kernels' split
#                                            # (benchmarks/kernel_split.py), both configs forced
#                                            # (SKIP_SPLIT=1: neither), its 3xTF32 configs
#                                            # forced in fp32 strict
#   PART=event_gap                           # build + event / graph / CUPTI kernel time of
#                                            # the large k == stride layers (EG_ONLY, EG_MODES)
#   PART=trace                               # no extension build: benchmarks/kxs_trace.cu
#                                            # (gemm_kxs_sm90's tile timeline, TF32) on the
#                                            # k == stride layers (TRACE_LAYERS), then exit
#   LAYERS_ONLY=1                            # with PART=2: the layer benchmark only
#   TANH_PROFILE=1                           # with PART=2: the GANs' Tanh layers, bare / fused
#   BUDGET=450                               # seconds this call may take (default 570)
#   SANITIZE=1                               # with PART=1: compute-sanitizer memcheck on a
#                                            # few configs of each sweep of the newtests list,
#                                            # gemm_kxs_sm90, gemm_phase_tma, gemm_out_tile
set -uo pipefail
OUT=${OUT:-/tmp/deconv_patch_out}
mkdir -p "$OUT/logs"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export DECONV_PATCH_CACHE=${DECONV_PATCH_CACHE:-/tmp/deconv_patch_cache}
L=$OUT/logs
START=$(date +%s)
step() { echo "== $1 ($(date +%T))"; }

step env
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
} 2>&1 | tee "$L/env.txt"

if [ "${PART:-}" = trace ]; then
# gemm_kxs_sm90's timeline per tile (main loops, epilogues, tail) after nothing, a 64 MB copy
# and a large-code kernel; a standalone program, so no extension build.
step "kxs_trace build"
"$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
  -DDECONV_PATCH_KXS_TRACE -Icuda \
  benchmarks/kxs_trace.cu -o /tmp/kxs_trace > "$L/kxs_trace_build.log" 2>&1 || \
  { tail -20 "$L/kxs_trace_build.log"; exit 1; }
# N CIN COUT H W: U-Net up1, Mask R-CNN mask head, YOLOv8-seg proto, U-Net up4.
while read -r shape; do
  [ -z "$shape" ] && continue
  step "kxs_trace $shape"
  timeout 60 /tmp/kxs_trace $shape 2>&1 | tee -a "$L/kxs_trace.log"
done <<< "${TRACE_LAYERS:-8 1024 512 28 28
100 256 256 14 14
8 256 256 80 80
8 128 64 196 196}"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
exit 0
fi

step build
# The extension's build directory for the sources as they are now (their digest names it).
cache_of() { python3 -c "from deconv_patch import extension as e; print(e.cache_dir())"; }
# seed_build_dir [SEED]: a source change gives a new build directory; when it does not exist
# yet, copy SEED (default: the newest earlier one on this machine) to it, so ninja recompiles
# only the units whose sources changed.
seed_build_dir() {
  local now seed=${1:-}
  now=$(cache_of 2>/dev/null)
  [ -z "$now" ] || [ -d "$now" ] && return
  [ -z "$seed" ] && seed=$(ls -dt "$DECONV_PATCH_CACHE"/*/ 2>/dev/null | head -1)
  [ -n "$seed" ] && cp -a "$seed" "$now" && echo "build directory seeded from $seed"
}
seed_build_dir
python3 -m deconv_patch.cli build 2>&1 | tee "$L/build.log" | tail -3

# Seconds left of the call's budget (BUDGET, default 570 s from the start of this script, for
# `timeout`; a smaller BUDGET when little device time is left).
left() { echo $(( START + ${BUDGET:-570} - $(date +%s) )); }
gpu_tests() {  # gpu_tests NAME SECONDS PYTEST-ARGS...: a -v log, summarised per test function
  local name=$1 limit=$2; shift 2
  [ "$limit" -gt $(( $(left) - 10 )) ] && limit=$(( $(left) - 10 ))
  [ "$limit" -lt 5 ] && { echo "skipped $name: no time left"; return; }
  step "GPU tests: $name"
  timeout "$limit" python3 -m pytest -v --tb=line -m cuda -p no:cacheprovider "$@" \
    > "$L/gpu-tests-$name.log" 2>&1; echo "exit $? (124 = timed out)"
  python3 benchmarks/pytest_summary.py "$L/gpu-tests-$name.log" | grep -vE "^\S+ +passed=[0-9]+$"
  tail -1 "$L/gpu-tests-$name.log"
}

# memcheck LOG SECONDS PATTERN PER-FUNCTION FILES...: compute-sanitizer memcheck on the first
# PER-FUNCTION collected cases of each test function whose ids match PATTERN (extended regex).
memcheck() {
  local log=$1 limit=$2 pattern=$3 per=$4 ids; shift 4
  ids=$(python3 -m pytest -q --co -p no:cacheprovider "$@" 2>/dev/null | grep -E "$pattern" | \
        awk -F'[' -v per="$per" '{ if (n[$1]++ < per) print }')
  timeout "$limit" compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest \
    -q -m cuda -p no:cacheprovider $ids > "$log" 2>&1; echo "sanitizer exit $?"
  grep -E "ERROR SUMMARY|Invalid|out of bounds|passed|failed" "$log" | head -10
}

# forced VARIANT MODES FORMATS ONLY [SECONDS [NEED]]: the layer benchmark with VARIANT forced on
# the layers ONLY names (all when empty), within SECONDS (default 60), its rows printed (geomean
# lines dropped); skipped when fewer than NEED seconds of the call's budget are left.
forced() {
  local tag="${1//:/_}_${2//,/-}_${3//,/-}" limit=${5:-60} need=${6:-0}
  [ "$(left)" -lt "$need" ] && { echo "skipped forced $1 ($2; $3): no time left"; return; }
  step "layer benchmark ($1 forced; $2; $3)"
  timeout "$limit" python3 benchmarks/layers.py --variant "$1" --modes "$2" --formats "$3" \
    ${4:+--only "$4"} --json "$OUT/forced_$tag.json" > "$L/forced_$tag.log" 2>&1
  grep -vE "skipped|^layer |TFLOP/s|geomean" "$L/forced_$tag.log"
}
# The k == stride layers, and the k != stride layers the phase TMA kernel covers.
kxs_layers="unet.up1,unet.up4,maskrcnn,yolov8seg"
phase_layers="dcgan.g2,dcgan.g3,pix2pix.u2,cyclegan,simplebl,keypoint,vae,dilated,asym"
# Names of a planner tuple (e.g. PHASE_TMA_CONFIGS), space-separated.
planner_names() { python3 -c "from deconv_patch import planner; print(' '.join(planner.$1))"; }
# ncu_layer LOG SECONDS NCU-ARGS... -- PROFILE-LAYER-ARGS...: ncu (GPU clocks left as they run)
# on benchmarks/profile_layer.py, output in LOG; prints each profiled kernel's name and metric rows.
ncu_layer() {
  local log=$1 limit=$2 ncu_args=(); shift 2
  while [ "$1" != -- ]; do ncu_args+=("$1"); shift; done; shift
  timeout "$limit" ncu --clock-control none "${ncu_args[@]}" \
    python3 benchmarks/profile_layer.py "$@" > "$log" 2>&1
  grep -E "^  [a-zA-Z_].*\(|^ +[a-z0-9_]+__[a-z0-9_.]+ " "$log" | sed 's/  */ /g' | cut -c1-150
}
# The bf16 / fp32 GAN models end to end (eager), where fused activations decide the speed.
gan_models_bench() {
  step "model benchmark (DCGAN, pix2pix; eager)"
  timeout 150 python3 benchmarks/models.py --models dcgan,pix2pix --no-compile \
    --out "$OUT/models_gan.json" > "$L/models_gan.log" 2>&1; tail -8 "$L/models_gan.log"
}

# The tests of tap-major gemm_kxs, the 3xTF32 fp32-strict mode (gemm_kxs, gemm_phase), the grouped
# kernel and gemm_phase_sm90, with the planner's rules for them (PART=newtests runs only these).
newtests=(tests/gpu/gemm_kxs/test_gemm_kxs_tap_major.py
          tests/gpu/gemm_kxs/test_gemm_kxs_3xtf32.py
          tests/gpu/gemm_phase/test_gemm_phase_3xtf32.py
          tests/gpu/gemm_phase/test_gemm_phase_sm90.py
          tests/gpu/grouped/test_grouped.py
          tests/gpu/test_planner.py::test_planner_rules_for_3xtf32_grouped_and_wgmma_phase)

if [ "${PART:-1}" = 1 ] || [ "${PART:-}" = newtests ]; then
if [ "${SCAN:-1}" = 1 ]; then
step "fp32-strict (3xTF32) error by reduction depth"
timeout 120 python3 benchmarks/strict_error_scan.py --cases 400 2>&1 | tee "$L/strict-scan.log"
fi
# The newtests list first (its wgmma part apart: a hung kernel must not eat the call), then the
# rest of the suite (the list deselected: --deselect=PATH for each entry).
gpu_tests new $(( $(left) - 300 )) -k "not sm90" "${newtests[@]}"
gpu_tests wgmma 120 -k "sm90" "${newtests[@]}"
fi
if [ "${PART:-1}" = 1 ]; then
gpu_tests suite $(( $(left) - 20 )) tests "${newtests[@]/#/--deselect=}"
if [ -n "${SANITIZE:-}" ] && [ "$(left)" -gt 60 ]; then
  step "compute-sanitizer (memcheck) on a few configs of each kernel's sweeps"
  memcheck "$L/sanitizer.log" $(( $(left) - 10 )) "sweep\[" 2 "${newtests[@]}" \
    tests/gpu/gemm_kxs_sm90 tests/gpu/gemm_phase_tma tests/gpu/gemm_out_tile
fi
fi

if [ "${PART:-}" = new ]; then
# Tap-major gemm_kxs, the grouped kernel, gemm_phase_sm90 and the 3xTF32 fp32-strict mode, each
# forced on the layers it covers: the numbers behind the planner's rules for them.
forced gemm_kxs:tap_major tf32,bf16,fp16 nhwc "$kxs_layers" 240
forced gemm_kxs fp32 nchw,nhwc "$kxs_layers" 240
forced gemm_kxs:tap_major fp32 nhwc "$kxs_layers" 240
forced gemm_phase fp32 nchw,nhwc "dcgan.g2,dcgan.g3,pix2pix,simplebl,vae,cyclegan" 240
forced grouped tf32,bf16 nchw,nhwc "depthwise,grouped,fcn8s" 240
forced gemm_phase_sm90 bf16,fp16 nchw,nhwc "dcgan,pix2pix,simplebl,vae,cyclegan,dilated,asym" 240
fi

if [ "${PART:-}" = kxs_sm90 ]; then
# Config 1 first (no setmaxnreg), each config's sweep under its own limit, then the rest.
gpu_tests kxs_sm90-128x128s6 90 -x -k "128x128s6 and not 128x128s6pp" tests/gpu/gemm_kxs_sm90
gpu_tests kxs_sm90-128x256s4 90 -x -k "128x256s4" tests/gpu/gemm_kxs_sm90
gpu_tests kxs_sm90-128x128s6pp 90 -x -k "128x128s6pp" tests/gpu/gemm_kxs_sm90
gpu_tests kxs_sm90-default 120 -k "not 128x" tests/gpu/gemm_kxs_sm90
for v in $(planner_names KXS_SM90_CONFIGS); do
  forced "$v" bf16,fp16,tf32 nhwc,nchw "$kxs_layers" 100
done
fi

if [ "${PART:-}" = phase_tma ]; then
# Config 0 first, each config's sweep under its own limit (a hung config cannot eat the call),
# then the 3xTF32 error scan, then gemm_kxs_sm90's tests (its NCHW paths).
for cfg in $(planner_names PHASE_TMA_CONFIGS | sed 's/[^ ]*://g'); do
  gpu_tests "phase_tma-$cfg" 75 -x -k "$cfg and not ${cfg}pp" tests/gpu/gemm_phase_tma
done
gpu_tests phase_tma-default 90 -k "not 128x" tests/gpu/gemm_phase_tma
step "fp32-strict (3xTF32) error of gemm_phase_tma by reduction depth"
timeout 60 python3 benchmarks/strict_error_scan.py --cases 300 --variants gemm_phase_tma 2>&1 \
  | tee "$L/strict-scan-phase-tma.log"
[ -z "${SKIP_KXS:-}" ] && gpu_tests kxs_sm90 120 tests/gpu/gemm_kxs_sm90
fi

if [ "${PART:-}" = strict ]; then
# gemm_phase_tma's 3xTF32 mode: its strict tests per config, the error scan, each config forced
# in fp32 strict on the k != stride layers, then the quick layer table (GPU-time columns).
gpu_tests phase_tma-strict 150 -k "strict" tests/gpu/gemm_phase_tma
step "fp32-strict (3xTF32) error of gemm_phase_tma by reduction depth"
timeout 90 python3 benchmarks/strict_error_scan.py --cases 400 --variants gemm_phase_tma 2>&1 \
  | tee "$L/strict-scan-phase-tma.log"
for v in $(planner_names PHASE_TMA_CONFIGS); do
  forced "$v" fp32 nhwc,nchw "$phase_layers" 60 150
done
step "layer benchmark (planner's choice, --quick, fp32 strict and bf16)"
timeout $(( $(left) - 15 )) python3 benchmarks/layers.py --quick --modes fp32,bf16 \
  --json "$OUT/layers_quick.json" > "$L/layers.log" 2>&1 || echo "layers.py exit $?"
tail -30 "$L/layers.log"
fi

if [ "${PART:-}" = relayout ]; then
# The binding's NCHW -> channels_last re-layout kernel: its test, the sweeps of every kernel that
# reads re-laid input, then the NCHW rows it serves (event and GPU time).
gpu_tests relayout 60 tests/gpu/relayout
gpu_tests phase_tma 100 tests/gpu/gemm_phase_tma
gpu_tests kxs_sm90 60 tests/gpu/gemm_kxs_sm90
gpu_tests phase-16bit 80 tests/gpu/gemm_phase tests/gpu/test_few_output_channel_layers.py
step "layer benchmark (planner's choice; NCHW rows that re-lay their input)"
timeout $(( $(left) - 15 )) python3 benchmarks/layers.py --modes bf16,tf32 --formats nchw \
  --only "maskrcnn,dcgan.g2,cyclegan,vae,unet" \
  --json "$OUT/layers_relayout.json" > "$L/layers.log" 2>&1 || echo "layers.py exit $?"
tail -45 "$L/layers.log"
fi

if [ "${PART:-}" = probe ]; then
# Measurements for the next steps: host vs GPU time per call (gemm_phase_tma's launch path on
# small layers), and ncu counters of Mask R-CNN's k == stride layer, bf16, NCHW against NHWC.
step "host overhead"
timeout 200 python3 benchmarks/host_overhead.py --only "dcgan.g2,dcgan.g3,simplebl.d2,maskrcnn" \
  --modes bf16,tf32 > "$L/host_overhead.log" 2>&1; tail -60 "$L/host_overhead.log"
for cl in "" --channels-last; do
  step "ncu: maskrcnn.mask bf16 ${cl:-NCHW} (gemm_kxs_sm90:128x128s6pp and cuDNN)"
  ncu_layer "$L/ncu_maskrcnn${cl:+_cl}.log" 120 -c 12 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_read.sum \
    -- --layer "maskrcnn.mask 256>256 14" --variant gemm_kxs_sm90:128x128s6pp --reps 2 $cl
done
fi

if [ "${PART:-}" = area ]; then
# gemm_kxs_sm90's kernel-area configs (NCHW output tiles holding every tap of their channels):
# their tests per config, each forced beside its base config on the NCHW k == stride rows, ncu's
# L2 write sectors on Mask R-CNN, then (time left) the other configs' tests (their machine code
# is unchanged; the Python side is shared).
for v in $(planner_names KXS_SM90_AREA_CONFIGS | sed 's/[^ ]*://g'); do
  gpu_tests "kxs_sm90-$v" 60 -x -k "$v" tests/gpu/gemm_kxs_sm90
done
for cfg in 128x256s4 128x256s4area 128x128s6pp 128x128s6pparea; do
  forced "gemm_kxs_sm90:$cfg" bf16,tf32 nchw "$kxs_layers" 45 60
done
for cfg in 128x256s4 128x256s4area; do
  [ "$(left)" -lt 45 ] && { echo "skipped ncu $cfg: no time left"; continue; }
  step "ncu: maskrcnn.mask bf16 NCHW, gemm_kxs_sm90:$cfg"
  ncu_layer "$L/ncu_maskrcnn_$cfg.log" 40 -k regex:gemm_kxs_sm90_kernel -c 2 \
    --metrics gpu__time_duration.sum,dram__bytes_write.sum,lts__t_sectors_op_write.sum \
    -- --layer "maskrcnn.mask 256>256 14" --variant "gemm_kxs_sm90:$cfg" --reps 2
done
gpu_tests kxs_sm90-others $(( $(left) - 15 )) -k "not area" tests/gpu/gemm_kxs_sm90
fi

if [ "${PART:-}" = round ]; then
# TF32 A operands read into registers and rounded there in gemm_kxs_sm90 and
# gemm_phase_tma: their tests (fp32 cases are TF32), then each kernel's configs forced in TF32
# on its layers, then the planner's TF32 table (ROUND_TABLE=0: not).
if [ -z "${SKIP_TESTS:-}" ]; then
  gpu_tests kxs_sm90 90 tests/gpu/gemm_kxs_sm90
  gpu_tests phase_tma 150 -k "not strict" tests/gpu/gemm_phase_tma
fi
for v in ${ROUND_KXS:-$(planner_names KXS_SM90_CONFIGS) $(planner_names KXS_SM90_AREA_CONFIGS)}; do
  forced "$v" tf32 "${ROUND_FORMATS:-nhwc,nchw}" "$kxs_layers" 45 60
done
for v in ${ROUND_PT:-$(planner_names PHASE_TMA_CONFIGS)}; do
  forced "$v" tf32 "${ROUND_FORMATS:-nhwc,nchw}" "$phase_layers" 60 70
done
if [ "${ROUND_TABLE:-1}" = 1 ] && [ "$(left)" -gt 100 ]; then
  step "layer benchmark (planner's choice, TF32)"
  timeout $(( $(left) - 15 )) python3 benchmarks/layers.py --modes tf32 \
    --json "$OUT/layers_tf32.json" > "$L/layers_tf32.log" 2>&1 || echo "layers.py exit $?"
  tail -6 "$L/layers_tf32.log"
fi
fi

if [ "${PART:-}" = ab ]; then
# A/B of kernel sources in one call: tests (AB_TESTS, pytest args) and forced timings
# (AB_FORCED: "variant|modes|formats|layers" lines) on this tree, then the files of AB_BASE
# (a folder laid out as cuda/, e.g. the previous commit's files) copied over cuda/, the extension
# rebuilt from a copy of this build's directory (ninja recompiles what changed), the same
# timings again (JSON tags base_*), and the tree restored.
[ -n "${AB_TESTS:-}" ] && gpu_tests ab ${AB_TEST_SECONDS:-150} $AB_TESTS
ab_forced() {  # ab_forced TAG-PREFIX
  while IFS='|' read -r v m f only; do
    [ -z "$v" ] && continue
    forced "$v" "$m" "$f" "$only" 45 40
    local t="${v//:/_}_${m//,/-}_${f//,/-}"
    cp "$OUT/forced_$t.json" "$OUT/$1_$t.json" 2>/dev/null
  done <<< "$AB_FORCED"
}
ab_forced new
if [ -n "${AB_BASE:-}" ] && [ "$(left)" -gt 150 ]; then
  prev=$(cache_of)
  mkdir -p /tmp/ab_saved
  # AB_BASE mirrors cuda/'s folders (e.g. gemm_phase_tma/gemm_phase_tma_kernel.cuh).
  (cd "$AB_BASE" && find . -type f) | while read -r f; do
    mkdir -p "/tmp/ab_saved/$(dirname "$f")"; cp "cuda/$f" "/tmp/ab_saved/$f"; cp "$AB_BASE/$f" "cuda/$f"
  done
  seed_build_dir "$prev"
  step "build (AB_BASE=$AB_BASE)"
  python3 -m deconv_patch.cli build > "$L/build_base.log" 2>&1 || tail -20 "$L/build_base.log"
  ab_forced base
  cp -r /tmp/ab_saved/. cuda/
fi
fi

if [ "${PART:-}" = col2im ]; then
# gemm_col2im (TF32 and 16-bit): its tests, where its GPU time goes kernel by kernel (GEMM,
# col2im, input re-layout; benchmarks/kernel_split.py) against cuDNN's, then both configs forced
# on the layers where one GEMM over every tap may win (COL2IM_LAYERS to change them).
gpu_tests col2im ${AB_TEST_SECONDS:-240} ${COL2IM_TESTS:-tests/gpu/col2im}
col2im_variants="aten,$(planner_names COL2IM_CONFIGS | tr ' ' ',')"
[ -n "${SKIP_SPLIT:-}" ] || for spec in "bf16 --channels-last" "bf16" "fp32 --channels-last" "fp32"; do
  step "kernel split: keypoint $spec"
  timeout 60 python3 benchmarks/kernel_split.py --layer "keypointrcnn 512>17 14" --dtype $spec \
    --variants "$col2im_variants" 2>&1 | tail -14
done
[ -n "${SKIP_SPLIT:-}" ] || for v in $(planner_names COL2IM_CONFIGS); do
  forced "$v" bf16,fp16,tf32 nchw,nhwc \
    "${COL2IM_LAYERS:-keypoint,pix2pix.u2,simplebl.d1,dcgan.g2,dcgan.g3,cyclegan}" 150 60
done
# ... its 3xTF32 configs in fp32 without TF32 (cuDNN's FFMA beside them).
for v in $(planner_names COL2IM_3XTF32_CONFIGS); do
  forced "$v" fp32 nchw,nhwc "${COL2IM_STRICT_LAYERS:-keypoint,pix2pix.u2,simplebl.d1}" 90 40
done
fi

if [ "${PART:-}" = gan_models ]; then
# The planner's NCHW choice for k == stride layers (kernel-area tiles), then where the bf16
# GAN models' eager time goes (benchmarks/models.py measured DCGAN 0.69x, pix2pix 0.89x while
# each of their layers ran faster): per-layer variants and times under autotune.
gpu_tests planner 90 -k "planner" tests
step "layer benchmark (planner's choice; k == stride rows)"
timeout 150 python3 benchmarks/layers.py --only "$kxs_layers" --json "$OUT/layers_kxs.json" \
  > "$L/layers_kxs.log" 2>&1 || echo "layers.py exit $?"
grep -vE "skipped|^layer |TFLOP/s" "$L/layers_kxs.log" | tail -40
step "validation reports with autotune (DCGAN, pix2pix)"
timeout 150 python3 benchmarks/validate_examples.py --models dcgan,pix2pix --dtypes bf16,fp32 \
  --cudnn-benchmark --out "$OUT/reports" > "$L/reports_tuned.log" 2>&1
sed -n '/^=====/p;/^layer /,/^end-to-end/p' "$L/reports_tuned.log" | grep -v "^---" | \
  awk '/^=====/ { print; next } { print $1, $2, $(NF-2), $(NF-1), $NF }'
grep -cE "^PASS" "$L/reports_tuned.log" | sed 's/^/reports passed: /'
gan_models_bench
fi

if [ "${PART:-}" = epilogue ]; then
# Activations fixed at compile time in the TMA kernels' stores: every config x activation of
# their epilogue sweeps, the other epilogue sweeps, autotune (timed with the epilogue) and the
# planner; then the GAN profile and models below, then the kernels' other tests.
gpu_tests epilogue 150 -k "epilogue" tests/gpu/gemm_phase_tma tests/gpu/gemm_kxs_sm90 \
  tests/gpu/test_epilogue.py tests/gpu/gemm_kxs/test_gemm_kxs_tap_major.py \
  tests/gpu/gemm_phase/test_gemm_phase_sm90.py
gpu_tests autotune 60 tests/gpu/test_autotune.py tests/gpu/test_planner.py \
  tests/gpu/gemm_kxs/test_gemm_kxs.py -k "autotune or planner"
fi

if [ "${PART:-}" = gan_profile ] || [ "${PART:-}" = epilogue ]; then
# The kernels behind the slow GAN layers of PART=gan_models (the output layers, Tanh fused):
# each patched layer's calls in the model, planner's choice vs cuDNN vs gemm_phase_tma.
step "profile: DCGAN bf16"
timeout 120 python3 benchmarks/profile_model_layers.py --model dcgan --dtype bf16 \
  --layers main.9,main.12 --variants aten,gemm_phase_tma:128x64s8pp 2>&1 | \
  tee "$L/profile_dcgan.log" | grep -v "Warning\|_warn_once"
step "profile: pix2pix bf16 (output layer)"
timeout 90 python3 benchmarks/profile_model_layers.py --model pix2pix --dtype bf16 \
  --layers model.up.1 --variants aten,gemm_phase_tma:128x64s8pp 2>&1 | \
  tee "$L/profile_pix2pix.log" | grep -v "Warning\|_warn_once"
fi

if [ "${PART:-}" = epilogue ]; then
gan_models_bench
gpu_tests kernels $(( $(left) - 15 )) -k "not epilogue" tests/gpu/gemm_phase_tma \
  tests/gpu/gemm_kxs_sm90
fi

if [ "${PART:-}" = phase_act ]; then
# gemm_phase and gemm_phase_sm90 now fix the activation at compile time (dispatch_activation):
# their epilogue sweeps, then each forced on the GAN layers, bare against fused activation.
gpu_tests phase_epilogue 120 -k "gemm_phase_config_epilogue or gemm_phase_sm90_epilogue or \
epilogue_sweep" tests/gpu/test_epilogue.py tests/gpu/gemm_phase/test_gemm_phase_sm90.py \
  tests/gpu/gemm_kxs/test_gemm_kxs_tap_major.py
phase_variants=gemm_phase:128x128,gemm_phase:128x64,gemm_phase:64x64,gemm_phase_sm90:128x128s4,gemm_phase_sm90:128x64s4,gemm_phase_tma:128x64s8pp
p2p=model.inner.inner.inner.up.1,model.inner.inner.up.1,model.inner.up.1,model.up.1
for spec in dcgan:main.3,main.6,main.9,main.12 pix2pix:$p2p; do
  model=${spec%%:*}
  step "profile: $model bf16, phase GEMMs forced"
  timeout 150 python3 benchmarks/profile_model_layers.py --model $model --dtype bf16 \
    --layers "${spec#*:}" --variants "aten,$phase_variants" 2>&1 | \
    tee "$L/profile_${model}_phase.log" | \
    grep -E "^[a-z]|act=|no activation"
done
# U-Net up1 (K = 1024) TF32 NHWC, issue 3's last row: is gemm_kxs_sm90 tensor-bound or L2-bound?
for v in "fp32 gemm_kxs_sm90:128x256s4" "fp32 gemm_kxs_sm90:128x128s6pp" \
         "bf16 gemm_kxs_sm90:128x256s4"; do
  set -- $v
  [ "$(left)" -lt 40 ] && { echo "skipped ncu $v: no time left"; continue; }
  step "ncu: unet.up1 $1 NHWC, $2 and cuDNN"
  ncu_layer "$L/ncu_up1_$1_${2//:/_}.log" 60 -k regex:"gemm_kxs_sm90_kernel|xmma|dgrad|cutlass" -c 4 \
    --metrics gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second,smsp__cycles_active.avg.pct_of_peak_sustained_elapsed \
    -- --layer "unet.up1 1024>512 28" --dtype $1 --channels-last --variant $2 --reps 2
done
fi

if [ "${PART:-}" = epi_ncu ]; then
# Where gemm_kxs_sm90's cooperative 128x256 tile spends its epilogue (U-Net up1 NHWC: 26 of
# 93.5 us in TF32): ncu warp-state and source counters (stall reasons per SASS line), saved as
# reports and as the source page (CSV) for reading on the host.
while IFS='|' read -r dt var layer; do
  [ -z "$dt" ] && continue
  [ "$(left)" -lt 60 ] && { echo "skipped ncu $dt $var $layer: no time left"; continue; }
  tag="${layer%% *}_${dt}_${var##*:}"
  step "ncu: $layer $dt NHWC, $var"
  timeout 150 ncu --clock-control none -k regex:gemm_kxs_sm90_kernel -c 1 --import-source yes \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SourceCounters --section SchedulerStats -f -o "$OUT/ncu_$tag" \
    python3 benchmarks/profile_layer.py --layer "$layer" --dtype "$dt" --channels-last \
    --variant "$var" --reps 1 > "$L/ncu_$tag.log" 2>&1; echo "ncu exit $?"
  ncu --import "$OUT/ncu_$tag.ncu-rep" --page details > "$L/ncu_${tag}_details.txt" 2>&1
  ncu --import "$OUT/ncu_$tag.ncu-rep" --page source --print-source sass --csv \
    > "$L/ncu_${tag}_sass.csv" 2>&1
  grep -E "Duration|Stall|Throughput|Warp Cycles|Issued Ipc|lg_throttle|Memory \[" \
    "$L/ncu_${tag}_details.txt" | head -30
done <<< "${EPI_CASES:-fp32|gemm_kxs_sm90:128x256s4|unet.up1 1024>512 28
bf16|gemm_kxs_sm90:128x256s4|unet.up1 1024>512 28}"
fi

if [ "${PART:-}" = event_gap ]; then
# Event time against GPU time where the GPU is the bottleneck (U-Net up1's 7-10 us): each path
# timed per call, per block, from a graph and from the profiler's kernel trace.
step "event gap"
timeout $(( $(left) - 15 )) python3 benchmarks/event_gap.py \
  --only "${EG_ONLY:-unet.up1,maskrcnn}" --modes "${EG_MODES:-tf32,bf16}" --formats nhwc \
  --variant "${EG_VARIANT:-gemm_kxs_sm90:128x256s4}" ${EG_ARGS:-} > "$L/event_gap.log" 2>&1
grep -vE "Warning|warn|^\s*$|STAGE:|profiler_|USDT|ERROR:" "$L/event_gap.log" | head -80
fi

if [ "${PART:-}" = host ]; then
# Where a small layer's host time goes (event time minus GPU time in the layer table): host /
# GPU / event time per path and the host calls of one planner call (torch.profiler).
step "host overhead with traces"
timeout $(( $(left) - 15 )) python3 benchmarks/host_overhead.py --only "dcgan.g2,pix2pix.u6" \
  --modes fp16,tf32 --variants gemm_phase_tma --trace > "$L/host_overhead.log" 2>&1
grep -vE "Warning|warn|^\s*$|STAGE:|profiler_|USDT|ERROR:" "$L/host_overhead.log" | head -150
fi

if [ "${PART:-}" = fewch ]; then
# Few-output-channel layers (fcn8s.up8: 21 channels, k16 s8, 64 phases) tie cuDNN: time, DRAM
# and L2 traffic of cuDNN's kernels and of the phase GEMMs forced, bf16, both layouts.
for v in "gemm_phase:128x32" "gemm_phase_tma:128x64s8pp"; do
  for cl in "" --channels-last; do
    [ "$(left)" -lt 30 ] && { echo "skipped ncu $v: no time left"; continue; }
    step "ncu: fcn8s.up8 bf16 ${cl:-NCHW}, $v and cuDNN"
    ncu_layer "$L/ncu_fcn8s_${v//:/_}${cl:+_cl}.log" 60 \
      -k regex:"conv_transpose2d|dgrad|folded|nchwToNhwc|nhwcAdd|tensorTransform" -c 12 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_read.sum,smsp__cycles_active.avg.pct_of_peak_sustained_elapsed \
      -- --layer "fcn8s.up8 21 k16s8" --variant "$v" --reps 2 $cl
  done
done
fi

if [ "${PART:-}" = outtile ]; then
# gemm_out_tile (output-tiled stride-phase GEMM for <= 32 output channels per group): its tests
# (heuristic and config sweeps, epilogues, full-size layers), then PyTorch's path, its heuristic
# and each config forced on the few-channel layers (each call within 75 s, skipped below 110 s
# left so the ncu run keeps its time), then ncu of fcn8s.up8 (time, DRAM and L2 sectors: the
# phase GEMMs wrote 12x the output in L2 write sectors there, NCHW).
[ -z "${SKIP_TESTS:-}" ] && gpu_tests outtile "${OT_TEST_SECONDS:-300}" tests/gpu/gemm_out_tile
if [ -n "${SANITIZE:-}" ] && [ "$(left)" -gt 60 ]; then
  step "compute-sanitizer (memcheck) on gemm_out_tile: 3 cases of each sweep, the full layers"
  memcheck "$L/sanitizer-outtile.log" $(( $(left) - 10 < 150 ? $(left) - 10 : 150 )) \
    "sweep\[|benchmark_layers\[bf16" 3 tests/gpu/gemm_out_tile
fi
# EXTRA_TESTS="PYTEST-ARGS": other GPU tests in the same call (the planner's and fast path's).
[ -n "${EXTRA_TESTS:-}" ] && gpu_tests extra 240 ${EXTRA_TESTS}
fewch_layers="fcn8s,dcgan.g5,fsrcnn,keypoint"
for v in ${OT_VARIANTS:-aten gemm_out_tile $(planner_names OUT_TILE_CONFIGS)}; do
  forced "$v" ${OT_MODES:-bf16,fp16,tf32,fp32} nchw,nhwc "$fewch_layers" 75 110
done
# ncu of the main kernel (time, DRAM / L2 traffic, issue slots, shared-memory bank conflicts,
# occupancy; the log keeps the warp-state section: why warps stall).
ot_metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_read.sum,smsp__cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,sm__warps_active.avg.pct_of_peak_sustained_active
[ -n "${SKIP_NCU:-}" ] || for spec in "fcn8s.up8 21 k16s8:bf16:nchw" "fsrcnn.x3 56>1 k9s3:bf16:nhwc" "dcgan.g5 64>3 32x32:bf16:nchw"; do
  IFS=: read -r layer dt fmt <<< "$spec"
  if [ "$(left)" -lt 40 ]; then echo "skipped ncu $layer: no time left"; continue; fi
  step "ncu: $layer $dt $fmt, gemm_out_tile"
  ncu_layer "$L/ncu_${layer%% *}_${fmt}_gemm_out_tile.log" $(( $(left) - 10 < 60 ? $(left) - 10 : 60 )) \
    -k regex:out_tile_kernel -c 1 --section WarpStateStats --metrics "$ot_metrics" \
    -- --layer "$layer" --variant gemm_out_tile --dtype "$dt" $([ "$fmt" = nhwc ] && echo --channels-last) --reps 1
done
fi

if [ "${PART:-}" = ffma ]; then
# ffma_tile (plain FFMA for few output channels, kernel == taps x stride): its tests, then its
# heuristic and each config forced on the layers it covers (each row has cuDNN's time beside
# ours; FT_MODES, FT_VARIANTS, FT_TEST_SECONDS; SKIP_TESTS=1: no tests).
[ -z "${SKIP_TESTS:-}" ] && gpu_tests ffma "${FT_TEST_SECONDS:-200}" tests/gpu/ffma_tile
for v in ${FT_VARIANTS:-ffma_tile $(planner_names FFMA_TILE_CONFIGS)}; do
  forced "$v" "${FT_MODES:-tf32,fp32,bf16}" nchw,nhwc "dcgan.g5,fsrcnn,keypoint" 60 40
done
fi

if [ "${PART:-}" = ffma_ncu ]; then
# ncu of ffma_tile (FT_NCU_VARIANTS, default its heuristic) on FSRCNN and DCGAN's output layer in
# fp32, NCHW: speed of light, occupancy, launch, warp-state and scheduler sections, the
# shared-memory wavefronts against the instructions, and the stall reasons per issued
# instruction.
for v in ${FT_NCU_VARIANTS:-ffma_tile}; do
  for layer in "fsrcnn.x3 56>1 k9s3" "dcgan.g5 64>3 32x32"; do
    [ "$(left)" -lt 40 ] && { echo "skipped ncu $v $layer: no time left"; continue; }
    step "ncu: $layer fp32 nchw, $v"
    log="$L/ncu_${layer%% *}_${v//:/_}.log"
    timeout 90 ncu --clock-control none -k regex:ffma_tile_kernel -c 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section SchedulerStats --section ComputeWorkloadAnalysis \
      --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
      python3 benchmarks/profile_layer.py --layer "$layer" --variant "$v" --dtype fp32 --reps 1 \
      > "$log" 2>&1
    grep -E "^ +[A-Za-z].* +[0-9.,]+$|^ +[a-z0-9_]+__[a-z0-9_.]+ " "$log" | grep -vE "^ +(Section|---)" \
      | sed 's/  */ /g' | cut -c1-110
  done
done
fi

if [ "${PART:-}" = phase_tma_bench ]; then
if [ -n "${KXS_NCHW:-}" ]; then
for v in $(planner_names KXS_SM90_CONFIGS); do
  forced "$v" bf16,tf32 nchw "$kxs_layers"
done
fi
for v in gemm_phase_tma $(planner_names PHASE_TMA_CONFIGS); do
  forced "$v" bf16,tf32,fp32 nhwc,nchw "$phase_layers" 60 70
done
fi

if [ "${PART:-}" = 2 ]; then  # (PART=1 ran them all) the planner's rules, against this build
gpu_tests planner 90 -k "planner" tests
fi
if [ -n "${TANH_PROFILE:-}" ]; then
# The GANs' Tanh output layers (3 channels: padded n tiles), bare against fused, after the
# padded columns stopped running the epilogue.
step "profile: DCGAN / pix2pix bf16 Tanh output layers"
for spec in dcgan:main.12 pix2pix:model.up.1; do
  timeout 60 python3 benchmarks/profile_model_layers.py --model ${spec%%:*} --dtype bf16 \
    --layers "${spec#*:}" --variants aten,gemm_phase_tma:128x64s8pp,gemm_phase_sm90:128x64s4 \
    2>&1 | tee -a "$L/profile_tanh.log" | grep -E "^[a-z]|act=|no activation|plan:"
done
fi
if [ "${PART:-2}" = 2 ]; then
step "layer benchmark (planner's choice)"
timeout $(( $(left) - 15 )) python3 benchmarks/layers.py ${QUICK:+--quick} --json "$OUT/layers.json" \
  > "$L/layers.log" 2>&1 || echo "layers.py exit $? (124 = timed out)"
tail -12 "$L/layers.log"
fi

if [ "${PART:-2}" = 2 ] && [ "$(left)" -gt 240 ]; then
# PyTorch's default (cudnn.benchmark off, no autotune) in fp32 strict on the phase layers: the
# planner's own choice (gemm_phase_tma's 3xTF32 on Hopper) against cuDNN's heuristic one.
step "layer benchmark (no autotune; fp32 strict; phase layers)"
timeout 90 python3 benchmarks/layers.py --no-autotune --modes fp32 --formats nhwc,nchw \
  --only "dcgan,pix2pix,cyclegan,simplebl,keypoint,dilated,asym,vae" \
  --json "$OUT/layers_noautotune_fp32.json" > "$L/layers_noautotune.log" 2>&1
grep -E "geomean|slowest" "$L/layers_noautotune.log"
fi

if [ -z "${QUICK:-}" ] && [ -z "${LAYERS_ONLY:-}" ] && [ "${PART:-2}" = 2 ]; then
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
  step "CLI walkthrough (info, patch with reports, load in a fresh process)"
  bash benchmarks/cli_walkthrough.sh /tmp/cli_walkthrough > "$L/cli_walkthrough.log" 2>&1
  grep -E "^\$|^\(exit|max\||calls:|PASS|FAIL" "$L/cli_walkthrough.log"
  mkdir -p "$OUT/reports" && cp /tmp/cli_walkthrough/*report* "$OUT/reports/" 2>/dev/null
fi
step summary
for f in "$L"/gpu-tests-*.log; do [ -f "$f" ] && echo "$(basename "$f" .log): $(tail -1 "$f")"; done
[ -f "$L/layers.log" ] && grep -E "geomean|slowest" "$L/layers.log"
[ -f "$L/demo.log" ] && grep -E "^\[|end-to-end|^result" "$L/demo.log"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs $( [ -d "$OUT/reports" ] && echo reports ) && rm -rf "$L"
[ -d "$OUT/reports" ] && rm -rf "$OUT/reports"
