// The ffma_tile build unit: its table, what the binding calls (common/family_unit.h).
#include "ffma_tile/ffma_tile.h"

DECONV_PATCH_DEFINE_UNIT(ffma_tile, FfmaTileUnit,
                         &ffma_tile_num_configs, &ffma_tile_config_name, &ffma_tile_supports,
                         &launch_conv_transpose2d_ffma_tile)
