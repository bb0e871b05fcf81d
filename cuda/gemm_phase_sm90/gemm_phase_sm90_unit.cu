// The gemm_phase_sm90 build unit: its table, what the binding calls (common/family_unit.h).
#include "gemm_phase_sm90/gemm_phase_sm90.h"

DECONV_PATCH_DEFINE_UNIT(gemm_phase_sm90, GemmPhaseSm90Unit,
                         &gemm_phase_sm90_supports, &gemm_phase_sm90_num_configs,
                         &gemm_phase_sm90_packed_weight_bytes, &launch_gemm_phase_sm90_pack_weight,
                         &launch_conv_transpose2d_gemm_phase_sm90)
