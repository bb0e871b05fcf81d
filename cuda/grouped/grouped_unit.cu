// The grouped build unit: its table, what the binding calls (common/family_unit.h).
#include "grouped/grouped.h"

DECONV_PATCH_DEFINE_UNIT(grouped, GroupedUnit,
                         &grouped_supports, &launch_conv_transpose2d_grouped)
