// The gemm_phase build unit: its table, what the binding calls (common/family_unit.h).
#include "gemm_phase/gemm_phase.h"

DECONV_PATCH_DEFINE_UNIT(gemm_phase, GemmPhaseUnit,
                         &gemm_phase_supports, &gemm_phase_num_configs,
                         &gemm_phase_packed_weight_bytes, &launch_gemm_phase_pack_weight,
                         &launch_conv_transpose2d_gemm_phase)
