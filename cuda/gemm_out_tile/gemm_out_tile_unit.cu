// The gemm_out_tile build unit: its table, what the binding calls (common/family_unit.h).
#include "gemm_out_tile/gemm_out_tile.h"

DECONV_PATCH_DEFINE_UNIT(gemm_out_tile, GemmOutTileUnit,
                         &gemm_out_tile_supports, &gemm_out_tile_weight_fits,
                         &gemm_out_tile_num_configs, &gemm_out_tile_config_name,
                         &gemm_out_tile_packed_weight_bytes, &launch_gemm_out_tile_pack_weight,
                         &launch_conv_transpose2d_gemm_out_tile)
