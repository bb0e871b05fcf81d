"""A CPU model of the tensor-core backward kernels' index math (cuda/direct_backward/
grad_input_mma.cu, weight_grad_mma.cu, mma_operands.cuh): which element each thread loads into
which shared-tile slot, through the same offset walks (TapWalk's tap-major k, the weight
gradient's pixel walk with its row and image wraps, 32-bit offsets within an image read from a
flat copy of each tensor's storage in its own strides), the warps' fragment coverage of the
output tile, the pixel ranges (pixel_ranges) and the partial sums' columns. Each step's tiles
are multiplied in float64 (the mma itself is the GPU tests' part); the gradients are checked
against float64 with every output written exactly once. Both element sizes: a step is 64 bytes
of a tile row, 32 16-bit or 16 fp32 values (3xTF32), which changes each thread's share.

It models the design, not the compiled kernels (tests/gpu/test_mma_backward.py runs those);
its use is to catch index errors on a machine without a GPU."""

from __future__ import annotations

from typing import Tuple

import numpy as np
import pytest
import torch

from tests.emulation.test_direct_backward_emulation import _tensors as direct_tensors

pytestmark = [pytest.mark.emulation, pytest.mark.extended]

THREADS, STEP_BYTES = 256, 64
ELEMENT_BYTES = [2, 4]
# (batch, in, out, (h, w), kernel, stride, padding, output_padding, dilation, groups)
CASES = [
    (2, 40, 3, (7, 6), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1),      # DCGAN's RGB output
    (1, 36, 1, (9, 8), (9, 9), (3, 3), (4, 4), (2, 2), (1, 1), 1),      # FSRCNN's k9 s3
    (2, 70, 6, (5, 7), (3, 5), (1, 2), (1, 2), (0, 1), (2, 1), 2),      # groups, asymmetric
    (1, 16, 12, (6, 5), (3, 3), (1, 1), (1, 1), (1, 1), (2, 2), 1),     # output_padding >= stride
    (3, 20, 80, (1, 1), (4, 4), (1, 1), (0, 0), (0, 0), (1, 1), 1),     # a 1 x 1 input, 5 steps
    (3, 8, 4, (11, 17), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 2),     # 561 pixels: 5 tiles,
    # two ranges, the second from mid-row of the second image
]


def _tensors(case, channels_last: bool, seed: int):
    x, w, dy = direct_tensors(case, seed)
    if channels_last:
        x, w, dy = (t.contiguous(memory_format=torch.channels_last) for t in (x, w, dy))
    return x, w, dy


def _storage(t: torch.Tensor) -> Tuple[np.ndarray, Tuple[int, ...]]:
    """The tensor's elements as laid out in memory (from element 0) and its strides."""
    flat = torch.as_strided(t, (t.untyped_storage().nbytes() // t.element_size(),), (1,))
    return flat.numpy(), t.stride()


class Geometry:
    def __init__(self, x, w, dy, case):
        _, cin, cout, _, (self.kh, self.kw), (self.sh, self.sw), (self.ph, self.pw), _, \
            (self.dh, self.dw), self.g = case
        self.n, _, self.h, self.wd = x.shape
        self.oh, self.ow = dy.shape[2:]
        self.cin_g, self.cout_g = cin // self.g, cout // self.g
        self.k_n = self.cout_g * self.kh * self.kw
        self.pixels = self.n * self.h * self.wd

    def pixel_at(self, pix: int) -> Tuple[int, int, int]:
        n, rest = divmod(pix, self.h * self.wd)
        return (n, *divmod(rest, self.wd))


class TapWalk:
    """mma_operands.cuh's TapWalk: k tap-major, (dh, dw) and the offset moved by additions."""

    def __init__(self, k: int, geo: Geometry, s_co: int, s_h: int, s_w: int):
        self.geo, self.s_co, self.s_h, self.s_w = geo, s_co, s_h, s_w
        tap, self.co = divmod(k, geo.cout_g)
        kh, self.kwi = divmod(tap, geo.kw)
        self.dh, self.dwi = kh * geo.dh, self.kwi * geo.dw
        self.off = self.co * s_co + kh * s_h + self.kwi * s_w

    def next(self) -> bool:
        geo = self.geo
        self.off += self.s_co
        self.co += 1
        if self.co < geo.cout_g:
            return False
        self.co = 0
        self.off += self.s_w - geo.cout_g * self.s_co
        self.dwi += geo.dw
        self.kwi += 1
        if self.kwi == geo.kw:
            self.kwi, self.dwi = 0, 0
            self.off += self.s_h - geo.kw * self.s_w
            self.dh += geo.dh
        return True


def _block_cells(m_warps: int, warp_m: int, warp_n: int):
    """acc[mi][nj][r] of every lane of a block's 8 warps (warp w at rows (w % m_warps) * warp_m,
    columns (w // m_warps) * warp_n), mma.m16n8 order: its (row, column) in the block's tile."""
    for warp in range(8):
        row0, col0 = (warp % m_warps) * warp_m, (warp // m_warps) * warp_n
        for lane in range(32):
            for mi in range(warp_m // 16):
                for nj in range(warp_n // 8):
                    for r in range(4):
                        yield (row0 + mi * 16 + lane // 4 + 8 * (r // 2),
                               col0 + nj * 8 + (lane % 4) * 2 + r % 2)


def grad_input_model(x, w, dy, case, element_bytes: int):
    """mma_grad_input_kernel: 128 pixels x 64 channels a block, 32 (16-bit) or 16 (fp32) k a
    step; threads gather G (pixel tid % 128, k (tid / 128) * 16 (8) ..) and W (channel tid % 64,
    k (tid / 64) * 8 (4) ..); warps 4 x 2 of 32 x 32."""
    step = STEP_BYTES // element_bytes
    a_run, b_run = 128 * step // THREADS, 64 * step // THREADS
    geo = Geometry(x, w, dy, case)
    dy_mem, gs = _storage(dy)
    w_mem, ws = _storage(w)
    dx = np.full((geo.n, geo.g * geo.cin_g, geo.h, geo.wd), np.nan)
    written = np.zeros(dx.shape, dtype=int)
    gs_h, gs_w = gs[2] * geo.dh, gs[3] * geo.dw
    for bx, by, grp in np.ndindex(-(-geo.pixels // 128), -(-geo.cin_g // 64), geo.g):
        p0, c0 = bx * 128, by * 64
        acc = np.zeros((128, 64))
        for k0 in range(0, geo.k_n, step):
            a = np.full((128, step), np.nan)
            b = np.full((64, step), np.nan)
            for tid in range(THREADS):
                a_m, a_k = tid % 128, (tid // 128) * a_run
                a_ok = p0 + a_m < geo.pixels
                n, ih, iw = geo.pixel_at(p0 + a_m) if a_ok else (0, 0, 0)
                oh0, ow0 = ih * geo.sh - geo.ph, iw * geo.sw - geo.pw
                img = n * gs[0] + grp * geo.cout_g * gs[1]
                pix_off = gs[2] * oh0 + gs[3] * ow0
                t = TapWalk(k0 + a_k, geo, gs[1], gs_h, gs_w)

                def inside():
                    return a_ok and 0 <= oh0 + t.dh < geo.oh and 0 <= ow0 + t.dwi < geo.ow

                tap_in = inside()
                for j in range(a_run):
                    ok = tap_in and k0 + a_k + j < geo.k_n
                    a[a_m, a_k + j] = dy_mem[img + pix_off + t.off] if ok else 0.0
                    if t.next():
                        tap_in = inside()
                b_n, b_k = tid % 64, (tid // 64) * b_run
                b_ok = c0 + b_n < geo.cin_g
                w_c = (grp * geo.cin_g + (c0 + b_n if b_ok else 0)) * ws[0]
                t = TapWalk(k0 + b_k, geo, ws[1], ws[2], ws[3])
                for j in range(b_run):
                    ok = b_ok and k0 + b_k + j < geo.k_n
                    b[b_n, b_k + j] = w_mem[w_c + t.off] if ok else 0.0
                    t.next()
            assert not np.isnan(a).any() and not np.isnan(b).any(), "a tile slot left unloaded"
            acc += a @ b.T
        for row, col in _block_cells(4, 32, 32):
            pix, c = p0 + row, c0 + col
            if pix < geo.pixels and c < geo.cin_g:
                n, ih, iw = geo.pixel_at(pix)
                dx[n, grp * geo.cin_g + c, ih, iw] = acc[row, col]
                written[n, grp * geo.cin_g + c, ih, iw] += 1
    assert (written == 1).all(), "every dx element written once"
    return dx


def pixel_ranges(blocks: int, pixels: int, sm_count: int, least: int, most: int) -> int:
    """weight_grad.cu's pixel_ranges."""
    if blocks == 0:
        return 1
    splits = -(-4 * sm_count // blocks)
    most = min(most, max(pixels // least, 1))
    return max(1, min(splits, most))


def weight_grad_model(x, w, dy, case, sm_count: int, element_bytes: int):
    """mma_weight_grad_partial_kernel and the reduce: 64 channels x 64 columns a block over one
    pixel range, 32 (16-bit) or 16 (fp32) pixels a step; thread row tid / 4 of both tiles,
    pixels (tid % 4) * 8 (4) ..; each run's offsets moved by the pixel walk; warps 2 x 4 of
    32 x 16; ranges added in order."""
    step = STEP_BYTES // element_bytes
    run_n = step * 64 // THREADS
    geo = Geometry(x, w, dy, case)
    x_mem, xs = _storage(x)
    dy_mem, gs = _storage(dy)
    col_blocks = -(-geo.k_n // 64)
    tiles = col_blocks * -(-geo.cin_g // 64)
    splits = pixel_ranges(tiles * geo.g, geo.pixels, sm_count, 256, 512)
    partial = np.full((splits, geo.g * geo.cin_g, geo.k_n), np.nan)
    for bx, grp, bz in np.ndindex(tiles, geo.g, splits):
        c0, k0 = (bx // col_blocks) * 64, (bx % col_blocks) * 64
        begin, end = geo.pixels * bz // splits, geo.pixels * (bz + 1) // splits
        acc = np.zeros((64, 64))
        for s0 in range(begin, end, step):
            xt = np.full((64, step), np.nan)
            gt = np.full((64, step), np.nan)
            for tid in range(THREADS):
                row, run = tid // 4, (tid % 4) * run_n
                c_ok, k_ok = c0 + row < geo.cin_g, k0 + row < geo.k_n
                co, rest = divmod(k0 + row if k_ok else 0, geo.kh * geo.kw)
                tap_dh, tap_dw = (rest // geo.kw) * geo.dh, (rest % geo.kw) * geo.dw
                x_c = (grp * geo.cin_g + (c0 + row if c_ok else 0)) * xs[1]
                dy_k = (grp * geo.cout_g + co) * gs[1] + tap_dh * gs[2] + tap_dw * gs[3]
                pix = s0 + run
                n, ih, iw = geo.pixel_at(pix) if pix < end else (0, 0, 0)
                x_n, dy_n = x_c + n * xs[0], dy_k + n * gs[0]
                oh = ih * geo.sh - geo.ph + tap_dh
                ow = iw * geo.sw - geo.pw + tap_dw
                x_off = ih * xs[2] + iw * xs[3]
                dy_off = (oh - tap_dh) * gs[2] + (ow - tap_dw) * gs[3]
                for j in range(run_n):
                    ok = pix + j < end
                    g_in = ok and k_ok and 0 <= oh < geo.oh and 0 <= ow < geo.ow
                    xt[row, run + j] = x_mem[x_n + x_off] if ok and c_ok else 0.0
                    gt[row, run + j] = dy_mem[dy_n + dy_off] if g_in else 0.0
                    x_off += xs[3]
                    ow += geo.sw
                    dy_off += geo.sw * gs[3]
                    iw += 1
                    if iw == geo.wd:
                        iw = 0
                        ih += 1
                        if ih == geo.h:
                            ih = 0
                            x_n += xs[0]
                            dy_n += gs[0]
                        x_off = ih * xs[2]
                        oh = ih * geo.sh - geo.ph + tap_dh
                        ow = -geo.pw + tap_dw
                        dy_off = (oh - tap_dh) * gs[2] + (ow - tap_dw) * gs[3]
            assert not np.isnan(xt).any() and not np.isnan(gt).any(), "a slot left unloaded"
            acc += xt @ gt.T
        for row, col in _block_cells(2, 32, 16):
            c, k = c0 + row, k0 + col
            if c < geo.cin_g and k < geo.k_n:
                partial[bz, grp * geo.cin_g + c, k] = acc[row, col]
    assert not np.isnan(partial).any(), "every range's column written"
    total = partial[0].copy()
    for s in range(1, splits):  # the reduce: ranges in order
        total += partial[s]
    return total.reshape(geo.g * geo.cin_g, geo.cout_g, geo.kh, geo.kw), splits


@pytest.mark.parametrize("element_bytes", ELEMENT_BYTES, ids=["16-bit", "fp32"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_the_input_gradients_index_math(case, channels_last, element_bytes):
    x, w, dy = _tensors(case, channels_last, seed=len(case) + case[1])
    _, _, _, _, _, s, p, op, d, g = case
    want, _, _ = torch.ops.aten.convolution_backward(dy, x, w, None, list(s), list(p), list(d),
                                                     True, list(op), g, [True, False, False])
    np.testing.assert_allclose(grad_input_model(x, w, dy, case, element_bytes), want.numpy(),
                               rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("element_bytes", ELEMENT_BYTES, ids=["16-bit", "fp32"])
@pytest.mark.parametrize("sm_count", [1, 132], ids=["one-range", "many-ranges"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_the_weight_gradients_index_math(case, channels_last, sm_count, element_bytes):
    x, w, dy = _tensors(case, channels_last, seed=len(case) + case[2])
    _, _, _, _, _, s, p, op, d, g = case
    _, want, _ = torch.ops.aten.convolution_backward(dy, x, w, None, list(s), list(p), list(d),
                                                     True, list(op), g, [False, True, False])
    got, splits = weight_grad_model(x, w, dy, case, sm_count, element_bytes)
    if sm_count > 1 and x.shape[0] * x.shape[2] * x.shape[3] >= 512:
        assert splits > 1  # the case spans more than one pixel range
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-9, atol=1e-9)
