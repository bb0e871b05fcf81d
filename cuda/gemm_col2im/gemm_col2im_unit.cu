// The gemm_col2im build unit: its table, what the binding calls (common/family_unit.h).
#include "gemm_col2im/col2im.h"

DECONV_PATCH_DEFINE_UNIT(gemm_col2im, GemmCol2imUnit,
                         &launch_col2im)
