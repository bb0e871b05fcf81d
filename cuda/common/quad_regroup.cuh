// Regrouping a quad's fp32 values for sector-complete 16-byte stores (no torch headers).
//
// In gemm_phase_tma's register-path epilogue lane l of a warp holds, for one output row and one
// 32-column group, the 8 consecutive logical columns 8q .. 8q+7 (q = l % 4; the 8 rows of a
// warp are l / 4). In 16-bit that is one 16-byte vector per lane, and the quad's 4 vectors are
// 64 contiguous bytes. In fp32 it is 32 bytes, stored as two 16-byte vectors: the first store of
// the warp then writes bytes 32q .. 32q+15 of each row, half of every 32-byte sector, and the
// second store the other halves, so each store instruction touches twice the sectors it fills
// (ncu, U-Net up1 TF32: 3.2 M L2 sectors for 1.6 M sectors of output).
// (gemm_kxs_sm90 no longer needs this: its fp32 packed weight has its own column permutation
// that puts the values there, kxs_lane_col.)
//
// regroup_quad_f32 exchanges halves inside the quad so that afterwards
//     v[0..3] = columns 4q .. 4q+3,   v[4..7] = columns 16 + 4q .. 16 + 4q+3,
// and the warp's store of v[0..3] (then of v[4..7]) writes 64 contiguous bytes per row: whole
// sectors. Two exchange steps of 4 shuffles each:
//   step 1, partner q^1: even lanes keep their low half and receive the partner's low half into
//     v[4..7]; odd lanes keep their high half and receive the partner's high half into v[0..3].
//     Lanes 0..3 then hold {0-3, 8-11}, {4-7, 12-15}, {16-19, 24-27}, {20-23, 28-31}.
//   step 2, partner q^2: lanes 0, 1 keep v[0..3] and receive the partner's v[0..3] into v[4..7];
//     lanes 2, 3 keep v[4..7] and receive the partner's v[4..7] into v[0..3].
//     Lanes 0..3 then hold {0-3, 16-19}, {4-7, 20-23}, {8-11, 24-27}, {12-15, 28-31}.
// Every lane of the warp must call it (full-mask shuffles): callers predicate the stores that
// follow, not the call.
#pragma once

namespace deconv_patch {

__device__ __forceinline__ void regroup_quad_f32(float (&v)[8], int lane) {
  // Step d (partner lane ^ d): a lane with bit d set keeps v[4..7] and receives the partner's
  // v[4..7] into v[0..3]; a lane without it keeps v[0..3] and receives the partner's v[0..3]
  // into v[4..7]. Each lane sends the half it does not keep: 4 shuffles per step.
#pragma unroll
  for (int d = 1; d <= 2; d <<= 1) {
    const bool keeps_high = (lane & d) != 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float send = keeps_high ? v[j] : v[4 + j];
      const float got = __shfl_xor_sync(0xffffffffu, send, d);
      if (keeps_high) {
        v[j] = got;
      } else {
        v[4 + j] = got;
      }
    }
  }
}

}  // namespace deconv_patch
