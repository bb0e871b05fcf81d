// The taps of one axis that land on an input pixel, for one output coordinate (the stride-phase
// algebra of AxisPhase, common/params.h). Shared by the direct kernel and col2im.
// No torch headers.
#pragma once

#include "common/params.h"

namespace deconv_patch {

// The valid taps of one axis for output coordinate `o`: tap k = first_k + j*step reads input
// coordinate first_i - j*in_step, for j in [0, count).
struct TapRange {
  int first_k;
  int first_i;
  int count;
};

__device__ __forceinline__ TapRange axis_taps(const AxisPhase& a, int o, int in_size) {
  TapRange r{0, 0, 0};
  const int t = o + a.pad;
  if (t % a.gcd != 0) return r;  // no tap of this axis lands on an input pixel
  int k0 = 0;
  if (a.step > 1) k0 = (int)(((long long)((t / a.gcd) % a.step) * a.inv) % a.step);
  if (k0 >= a.kernel) return r;
  // ih0 = (t - k0*dil) / stride is exact by construction of k0.
  const int i0 = (t - k0 * a.dil) / a.stride;
  if (i0 < 0) return r;
  // j must keep k < kernel, i >= 0 and i <= in_size - 1.
  int j_end = (a.kernel - 1 - k0) / a.step + 1;
  const int j_end_i = i0 / a.in_step + 1;
  if (j_end_i < j_end) j_end = j_end_i;
  int j_begin = 0;
  if (i0 > in_size - 1) j_begin = (i0 - (in_size - 1) + a.in_step - 1) / a.in_step;
  if (j_begin >= j_end) return r;
  r.first_k = k0 + j_begin * a.step;
  r.first_i = i0 - j_begin * a.in_step;
  r.count = j_end - j_begin;
  return r;
}

}  // namespace deconv_patch
