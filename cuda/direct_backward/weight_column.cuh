// A column k of a group's weight gradient, k = (co, kh, kw) in the weight's (Cout/g, KH, KW)
// order (also the order of p.partial's columns), as its output channel and tap.
#pragma once

namespace deconv_patch {

struct Tap {
  int co, kh, kw;
};

__device__ __forceinline__ Tap tap_of(int k, int kernel_h, int kernel_w) {
  const int taps = kernel_h * kernel_w;
  const int co = k / taps, rest = k - co * taps;
  const int kh = rest / kernel_w;
  return {co, kh, rest - kh * kernel_w};
}

}  // namespace deconv_patch
