// The gemm_phase_tma build unit: its table, what the binding calls (common/family_unit.h).
#include "gemm_phase_tma/gemm_phase_tma.h"

DECONV_PATCH_DEFINE_UNIT(gemm_phase_tma, GemmPhaseTmaUnit,
                         &gemm_phase_tma_supports, &gemm_phase_tma_num_configs,
                         &gemm_phase_tma_config_name, &gemm_phase_tma_packed_weight_bytes,
                         &launch_gemm_phase_tma_pack_weight,
                         &launch_conv_transpose2d_gemm_phase_tma)
