// The gemm_kxs build unit: its table, what the binding calls (common/family_unit.h).
#include "gemm_kxs/gemm_kxs.h"

DECONV_PATCH_DEFINE_UNIT(gemm_kxs, GemmKxsUnit,
                         &gemm_kxs_supports, &launch_conv_transpose2d_gemm_kxs)
