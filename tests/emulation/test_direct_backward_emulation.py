"""A CPU model of the direct backward kernels' work split (cuda/direct_backward/): which thread
sums which terms (the tiled input gradient's blocks, shared tiles and 4 x 8 thread tiles too), the weight gradient's blocks, channel lanes, 16-column chunks, pixel ranges
(direct_weight_grad_splits) and its fixed-order sums (a warp's shuffles, 8 rows, then the
ranges), checked against float64 gradients with every output written exactly once.

It models the design, not the compiled kernels (tests/gpu/test_direct_backward.py runs those);
its use is to catch index errors on a machine without a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.emulation, pytest.mark.extended]

COLS, THREADS = 16, 256
# (batch, in, out, (h, w), kernel, stride, padding, output_padding, dilation, groups)
CASES = [
    (2, 8, 8, (6, 5), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 8),
    (2, 6, 3, (5, 7), (4, 4), (2, 2), (1, 1), (1, 0), (1, 1), 1),
    (1, 5, 1, (9, 8), (9, 9), (3, 3), (4, 4), (2, 2), (1, 1), 1),
    (2, 4, 6, (4, 5), (3, 5), (1, 2), (1, 2), (0, 1), (2, 1), 2),
    (1, 40, 40, (3, 4), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 40),
    (3, 2, 2, (1, 1), (4, 4), (1, 1), (0, 0), (0, 0), (1, 1), 1),
    (2, 4, 2, (20, 16), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 2),    # two pixel ranges
    (1, 33, 33, (24, 24), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 33),  # a 1-lane last tile
]


def _tensors(case, seed):
    n, cin, cout, hw, k, s, p, op, d, g = case
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, cin, *hw, generator=gen, dtype=torch.float64)
    w = torch.randn(cin, cout // g, *k, generator=gen, dtype=torch.float64)
    out = torch.nn.functional.conv_transpose2d(x, w, None, s, p, op, g, d)
    dy = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    return x, w, dy


def _reference(x, w, dy, case):
    _, _, _, _, _, s, p, op, d, g = case
    gx, gw, _ = torch.ops.aten.convolution_backward(dy, x, w, None, list(s), list(p), list(d),
                                                    True, list(op), g, [True, True, False])
    return gx.numpy(), gw.numpy()


def taps_inside(first: int, dil: int, taps: int, size: int):
    """taps_inside (grad_input.cu): taps k in [lo, hi) with 0 <= first + k * dil < size."""
    lo = 0 if first >= 0 else (-first + dil - 1) // dil
    room = size - 1 - first
    hi = 0 if room < 0 else min(taps, room // dil + 1)
    return lo, hi


def grad_input_model(x, w, dy, case):
    """direct_grad_input_kernel: per element of dx, per output channel of its group the taps
    inside dy (their ranges worked out once, no bounds checks), then across channels."""
    _, cin, _, _, (kh_n, kw_n), (sh, sw), (ph, pw), _, (dh, dw), g = case
    n_, _, h, wd = x.shape
    oh_n, ow_n = dy.shape[2:]
    in_pg, out_pg = cin // g, w.shape[1]
    dx = np.full(x.shape, np.nan)
    for n, c, ih, iw in np.ndindex(n_, cin, h, wd):
        grp = c // in_pg
        oh0, ow0 = ih * sh - ph, iw * sw - pw
        kh_lo, kh_hi = taps_inside(oh0, dh, kh_n, oh_n)
        kw_lo, kw_hi = taps_inside(ow0, dw, kw_n, ow_n)
        acc = 0.0
        for co in range(out_pg):
            part = 0.0
            for kh in range(kh_lo, kh_hi):
                for kw in range(kw_lo, kw_hi):
                    oh, ow = oh0 + kh * dh, ow0 + kw * dw
                    assert 0 <= oh < oh_n and 0 <= ow < ow_n
                    part += dy[n, grp * out_pg + co, oh, ow] * w[c, co, kh, kw]
            acc += part
        assert np.isnan(dx[n, c, ih, iw])
        dx[n, c, ih, iw] = acc
    return dx


class _Geometry:
    """A case's sizes as the kernels read them from ConvTranspose2dGradParams."""

    def __init__(self, x, w, dy, case):
        _, cin, _, _, (self.kh_n, self.kw_n), (self.sh, self.sw), (self.ph, self.pw), _, \
            (self.dh, self.dw), self.g = case
        self.n, self.cin, self.h, self.wd = x.shape
        self.oh_n, self.ow_n = dy.shape[2:]
        self.in_pg, self.out_pg = cin // self.g, w.shape[1]
        self.k_n = self.out_pg * self.kh_n * self.kw_n
        self.pixels = self.n * self.h * self.wd

    def pixel(self, pix):
        """(n, ih, iw) of a flat input pixel."""
        n, hw = divmod(pix, self.h * self.wd)
        return (n, *divmod(hw, self.wd))

    def tap_pixel(self, k, ih, iw):
        """(co, oh, ow) of column k = (co, kh, kw) at input pixel (ih, iw)."""
        co, rest = divmod(k, self.kh_n * self.kw_n)
        kh, kw = divmod(rest, self.kw_n)
        return co, ih * self.sh - self.ph + kh * self.dh, iw * self.sw - self.pw + kw * self.dw

    def inside(self, oh, ow):
        return 0 <= oh < self.oh_n and 0 <= ow < self.ow_n


def tiled_grad_input_model(x, w, dy, case):
    """tiled_grad_input_kernel (grad_input_tiled.cu): per block 64 channels x 128 pixels of one
    group, k stepped by 8 through the two shared tiles, each loaded by the threads that
    kernel assigns (weight: channel tid % 64, rows tid // 64 + 0 / 4; grad_output: pixel
    tid % 128, rows tid // 128 + 0 / 2 / 4 / 6), each thread's 4 x 8 outputs summed in k
    order in parts of four steps, every output written once."""
    bm, bn, bk, tm_n, tn_n, threads, steps_per_part = 64, 128, 8, 4, 8, 256, 4
    geo = _Geometry(x, w, dy, case)
    dx = np.full(x.shape, np.nan)
    for bx, by, grp in np.ndindex(-(-geo.pixels // bn), -(-geo.in_pg // bm), geo.g):
        c0, p0 = by * bm, bx * bn
        acc = np.zeros((threads, tm_n, tn_n))
        part = np.zeros((threads, tm_n, tn_n))
        for k0 in range(0, geo.k_n, bk):
            a_tile = np.full((bk, bm), np.nan)
            b_tile = np.full((bk, bn), np.nan)
            for tid in range(threads):
                a_m, a_row = tid % bm, tid // bm
                for i in range(2):
                    r, k = a_row + 4 * i, k0 + a_row + 4 * i
                    v = 0.0
                    if c0 + a_m < geo.in_pg and k < geo.k_n:
                        co, rest = divmod(k, geo.kh_n * geo.kw_n)
                        kh, kw = divmod(rest, geo.kw_n)
                        v = w[grp * geo.in_pg + c0 + a_m, co, kh, kw]
                    assert np.isnan(a_tile[r, a_m])
                    a_tile[r, a_m] = v
                b_n, b_row = tid % bn, tid // bn
                pix = p0 + b_n
                for i in range(4):
                    r, k = b_row + 2 * i, k0 + b_row + 2 * i
                    v = 0.0
                    if pix < geo.pixels and k < geo.k_n:
                        n, ih, iw = geo.pixel(pix)
                        co, oh, ow = geo.tap_pixel(k, ih, iw)
                        if geo.inside(oh, ow):
                            v = dy[n, grp * geo.out_pg + co, oh, ow]
                    assert np.isnan(b_tile[r, b_n])
                    b_tile[r, b_n] = v
            assert not np.isnan(a_tile).any() and not np.isnan(b_tile).any()
            for tid in range(threads):
                tm, tn = tid // (bn // tn_n), tid % (bn // tn_n)
                for r in range(bk):
                    part[tid] += np.outer(a_tile[r, tm * tm_n:(tm + 1) * tm_n],
                                          b_tile[r, tn * tn_n:(tn + 1) * tn_n])
            if (k0 // bk) % steps_per_part == steps_per_part - 1:
                acc, part = acc + part, np.zeros_like(part)
        acc += part
        for tid in range(threads):
            tm, tn = tid // (bn // tn_n), tid % (bn // tn_n)
            for j in range(tn_n):
                pix = p0 + tn * tn_n + j
                if pix >= geo.pixels:
                    break
                n, ih, iw = geo.pixel(pix)
                for i in range(tm_n):
                    c = c0 + tm * tm_n + i
                    if c < geo.in_pg:
                        assert np.isnan(dx[n, grp * geo.in_pg + c, ih, iw])
                        dx[n, grp * geo.in_pg + c, ih, iw] = acc[tid, i, j]
    return dx


def tiled_splits_model(blocks: int, pixels: int, sm_count: int) -> int:
    """tiled_weight_grad_splits."""
    splits = -(-4 * sm_count // blocks)
    most = min(max(pixels // 128, 1), 512)
    return max(1, min(splits, most))


def tiled_weight_grad_model(x, w, dy, case, sm_count: int):
    """tiled_weight_grad_partial_kernel (weight_grad_tiled.cu) + the reduce: per block 64
    channels x 64 columns of one group over one pixel range, 16 pixels a step through the two
    shared tiles, each loaded by the thread the kernel assigns (pixel lane tid % 16, channel and
    column tid // 16 + 16 i), each thread's 4 x 4 sums in pixel order, the ranges added in
    order; every partial sum written once."""
    bm, bn, bp, threads = 64, 64, 16, 256
    geo = _Geometry(x, w, dy, case)
    col_blocks = -(-geo.k_n // bn)
    tiles = col_blocks * -(-geo.in_pg // bm)
    splits = tiled_splits_model(tiles * geo.g, geo.pixels, sm_count)
    partial = np.full((splits, geo.cin, geo.k_n), np.nan)
    for bx, grp, bz in np.ndindex(tiles, geo.g, splits):
        c0, k0 = (bx // col_blocks) * bm, (bx % col_blocks) * bn
        begin, end = geo.pixels * bz // splits, geo.pixels * (bz + 1) // splits
        acc = np.zeros((threads, 4, 4))
        for s0 in range(begin, end, bp):
            x_tile = np.full((bp, bm), np.nan)
            g_tile = np.full((bp, bn), np.nan)
            for tid in range(threads):
                lane, row = tid % bp, tid // bp
                pix = s0 + lane
                for i in range(4):
                    c, k = c0 + row + 16 * i, k0 + row + 16 * i
                    xv = gv = 0.0
                    if pix < end:
                        n, ih, iw = geo.pixel(pix)
                        if c < geo.in_pg:
                            xv = x[n, grp * geo.in_pg + c, ih, iw]
                        if k < geo.k_n:
                            co, oh, ow = geo.tap_pixel(k, ih, iw)
                            if geo.inside(oh, ow):
                                gv = dy[n, grp * geo.out_pg + co, oh, ow]
                    assert np.isnan(x_tile[lane, row + 16 * i])
                    assert np.isnan(g_tile[lane, row + 16 * i])
                    x_tile[lane, row + 16 * i], g_tile[lane, row + 16 * i] = xv, gv
            for tid in range(threads):
                tm, tn = tid // 16, tid % 16
                step = np.zeros((4, 4))
                for r in range(bp):
                    step += np.outer(x_tile[r, tm * 4:tm * 4 + 4], g_tile[r, tn * 4:tn * 4 + 4])
                acc[tid] += step
        for tid in range(threads):
            tm, tn = tid // 16, tid % 16
            for i in range(4):
                c = c0 + tm * 4 + i
                if c >= geo.in_pg:
                    break
                for j in range(4):
                    k = k0 + tn * 4 + j
                    if k < geo.k_n:
                        assert np.isnan(partial[bz, grp * geo.in_pg + c, k])
                        partial[bz, grp * geo.in_pg + c, k] = acc[tid, i, j]
    assert not np.isnan(partial).any()
    summed = np.zeros((geo.cin, geo.k_n))
    for s in range(splits):
        summed += partial[s]
    return summed.reshape(geo.cin, geo.out_pg, geo.kh_n, geo.kw_n), splits


def splits_model(blocks: int, pixels: int, sm_count: int) -> int:
    """direct_weight_grad_splits."""
    splits = -(-4 * sm_count // blocks)
    most = min(max(pixels // 256, 1), 64)
    return max(1, min(splits, most))


def weight_grad_model(x, w, dy, case, channels_last: bool, sm_count: int):
    """direct_weight_grad_partial_kernel + direct_weight_grad_reduce_kernel."""
    _, cin, _, _, (kh_n, kw_n), (sh, sw), (ph, pw), _, (dh, dw), g = case
    n_, _, h, wd = x.shape
    oh_n, ow_n = dy.shape[2:]
    in_pg, out_pg = cin // g, w.shape[1]
    cols = out_pg * kh_n * kw_n
    chunks = -(-cols // COLS)
    lanes = 32 if channels_last and cin >= 32 else 1
    pix_lanes = THREADS // lanes
    blocks = -(-cin // lanes) * chunks
    pixels = n_ * h * wd
    splits = splits_model(blocks, pixels, sm_count)
    partial = np.full((splits, cin, cols), np.nan)
    for bx, by in np.ndindex(blocks, splits):
        chunk, tile = bx % chunks, bx // chunks
        begin, end = pixels * by // splits, pixels * (by + 1) // splits
        acc = np.zeros((pix_lanes, lanes, COLS))
        for t in range(THREADS):
            lane, pl = t % lanes, t // lanes
            ci = tile * lanes + lane
            if ci >= cin:
                continue
            grp = ci // in_pg
            for pix in range(begin + pl, end, pix_lanes):
                n, hw = divmod(pix, h * wd)
                ih, iw = divmod(hw, wd)
                for j in range(COLS):
                    q = chunk * COLS + j
                    if q >= cols:
                        continue
                    kw, kh, co = q % kw_n, (q // kw_n) % kh_n, q // (kw_n * kh_n)
                    oh, ow = ih * sh + kh * dh - ph, iw * sw + kw * dw - pw
                    if 0 <= oh < oh_n and 0 <= ow < ow_n:
                        acc[pl, lane, j] += x[n, ci, ih, iw] * dy[n, grp * out_pg + co, oh, ow]
        if lanes == 1:  # __shfl_down_sync tree in each warp, then the 8 warp sums
            v = acc[:, 0, :].reshape(8, 32, COLS).copy()
            for offset in (16, 8, 4, 2, 1):
                v[:, :32 - offset] += v[:, offset:]
            rows = v[:, 0, :]
        else:
            rows = acc  # [8 pixel lanes][32 lanes][COLS]
        # the block's threads write lanes x COLS sums, some threads two
        for thread in range(THREADS):
            for t in range(thread, lanes * COLS, THREADS):
                lane, j = t % lanes, t // lanes
                ci, q = tile * lanes + lane, chunk * COLS + j
                if ci < cin and q < cols:
                    assert np.isnan(partial[by, ci, q])
                    row = rows[:, j] if lanes == 1 else rows[:, lane, j]
                    total = 0.0
                    for r in range(8):
                        total += row[r]
                    partial[by, ci, q] = total
    assert not np.isnan(partial).any()
    summed = np.zeros((cin, cols))
    for s in range(splits):
        summed += partial[s]
    return summed.reshape(cin, out_pg, kh_n, kw_n), splits


# The tiled kernels' cases: more than one block along pixels, channels and columns, partial
# last blocks, groups, and a k that is not a multiple of 8.
TILED_CASES = CASES + [
    (2, 70, 6, (9, 9), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),      # 70 channels, 162 pixels
    (1, 12, 6, (5, 6), (3, 5), (1, 2), (1, 2), (0, 1), (2, 1), 3),      # groups of 4 in, 2 out
    (1, 8, 16, (6, 7), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),      # 144 columns: 3 blocks
]


@pytest.mark.parametrize("model", ["grad_input_model", "tiled_grad_input_model"])
@pytest.mark.parametrize("case", TILED_CASES, ids=[f"case{i}" for i in range(len(TILED_CASES))])
def test_grad_input_models(case, model):
    x, w, dy = _tensors(case, seed=3)
    ref_x, _ = _reference(x, w, dy, case)
    got = globals()[model](x.numpy(), w.numpy(), dy.numpy(), case)
    np.testing.assert_allclose(got, ref_x, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("sm_count", [1, 132])
@pytest.mark.parametrize("case", TILED_CASES, ids=[f"case{i}" for i in range(len(TILED_CASES))])
def test_tiled_weight_grad_model(case, sm_count):
    x, w, dy = _tensors(case, seed=4)
    _, ref_w = _reference(x, w, dy, case)
    got, splits = tiled_weight_grad_model(x.numpy(), w.numpy(), dy.numpy(), case, sm_count)
    assert 1 <= splits <= 512
    if sm_count > 1 and x.shape[0] * x.shape[2] * x.shape[3] >= 256:
        assert splits >= 2  # the ranges' path is exercised
    np.testing.assert_allclose(got, ref_w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("sm_count", [1, 132])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_weight_grad_model(case, channels_last, sm_count):
    x, w, dy = _tensors(case, seed=2)
    _, ref_w = _reference(x, w, dy, case)
    got, splits = weight_grad_model(x.numpy(), w.numpy(), dy.numpy(), case, channels_last,
                                    sm_count)
    assert 1 <= splits <= 64
    if sm_count > 1 and x.shape[0] * x.shape[2] * x.shape[3] >= 512:
        assert splits >= 2  # the ranges' path is exercised
    np.testing.assert_allclose(got, ref_w, rtol=1e-10, atol=1e-10)
