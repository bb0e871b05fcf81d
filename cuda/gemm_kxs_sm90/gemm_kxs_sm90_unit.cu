// The gemm_kxs_sm90 build unit: its table, what the binding calls (common/family_unit.h).
#include "gemm_kxs_sm90/gemm_kxs_sm90.h"

DECONV_PATCH_DEFINE_UNIT(gemm_kxs_sm90, GemmKxsSm90Unit,
                         &gemm_kxs_sm90_supports, &gemm_kxs_sm90_num_configs,
                         &gemm_kxs_sm90_packed_weight_bytes, &launch_gemm_kxs_sm90_pack_weight,
                         &launch_conv_transpose2d_gemm_kxs_sm90,
                         &launch_conv_transpose2d_gemm_kxs_sm90_f32_out)
