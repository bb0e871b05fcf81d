// The tiled weight pack's index math (cuda/common/tiled_pack.cuh with a family's layout) against
// the family's per-element pack, on the CPU: for a weight of the case's shape with the strides
// in `p`, every weight element (row r, inner element j) lands where the per-element pack reads
// that element from, each packed element is written at most once and every one that holds a
// weight element is written; the buffer is zeroed first exactly when some packed element holds
// none. Included by the families' emulations after their kernel code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tiled_pack.cuh"

// The first problem found, or "" when none. source(idx): the weight offset the per-element pack
// copies into packed element idx, or -1 for a zero; zeroes: whether the family's launch zeroes
// the buffer before the tiled pack.
template <class Layout, class Source>
std::string tiled_pack_problem(const deconv_patch::ConvTranspose2dParams& p, int64_t total,
                               const Layout& layout, Source source, bool zeroes) {
  deconv_patch::TiledPackShape s;
  if (!deconv_patch::tiled_pack_shape(p, s)) return "tiled_pack_shape refused the weight";
  std::vector<int64_t> src_of((size_t)total);
  bool padded = false;
  for (int64_t idx = 0; idx < total; ++idx) {
    src_of[(size_t)idx] = source(idx);
    padded = padded || src_of[(size_t)idx] < 0;
  }
  if (padded != zeroes)
    return padded ? "padded layout not zeroed first" : "zeroed without padding";
  std::vector<unsigned char> hits((size_t)total, 0);
  for (int r = 0; r < s.rows; ++r) {
    const int64_t row = layout.row(r);
    for (int j = 0; j < s.inner; ++j) {
      int oc, kh, kw;
      deconv_patch::tiled_pack_inner(s, j, oc, kh, kw);
      const int64_t at = layout.line(oc, kh, kw) + row;
      const std::string where = " (row " + std::to_string(r) + ", inner " + std::to_string(j) + ")";
      if (at < 0 || at >= total) return "outside the buffer" + where;
      if (src_of[(size_t)at] != (int64_t)r * s.row_stride + deconv_patch::tiled_pack_offset(s, j))
        return "wrong element" + where;
      if (hits[(size_t)at]++ != 0) return "written twice" + where;
    }
  }
  for (int64_t idx = 0; idx < total; ++idx)
    if (src_of[(size_t)idx] >= 0 && hits[(size_t)idx] == 0)
      return "packed element " + std::to_string(idx) + " not written";
  return "";
}

// The weight layouts the tiled pack reads: [Cin][Cout/g][KH][KW] contiguous, channels_last, or
// a contiguous [Cout/g][Cin][KH][KW] with its channel dims swapped (what an input gradient reads).
enum class WeightLayout { kPlain, kChannelsLast, kSwapped };
inline void set_weight_strides(deconv_patch::ConvTranspose2dParams& p, WeightLayout layout) {
  const int64_t kh = p.ph_h.kernel, kw = p.ph_w.kernel, co = p.out_per_group;
  const int64_t ci = p.groups * p.in_per_group;
  const int64_t plain[4] = {co * kh * kw, kh * kw, kw, 1};
  const int64_t cl[4] = {co * kh * kw, 1, kw * co, co};
  const int64_t swapped[4] = {kh * kw, ci * kh * kw, kw, 1};
  const int64_t* st = layout == WeightLayout::kPlain          ? plain
                      : layout == WeightLayout::kChannelsLast ? cl
                                                              : swapped;
  for (int i = 0; i < 4; ++i) p.w_stride[i] = st[i];
}
