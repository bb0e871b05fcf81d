"""A CPU model of gemm_out_tile's index math (cuda/gemm_out_tile/gemm_out_tile.cu), checked
against PyTorch's conv_transpose2d: the phase tables, the packed weight's fragment order, the
input footprint and its chunk-offset table, the lane mapping of ldmatrix.x4 and of the mma
fragments (m16n8k16 for 16-bit, m16n8k8 for TF32; 3xTF32's hi / lo fragments and split A), the
staging tile and the run stores.

It models the design, not the compiled kernel (the GPU tests in
tests/gpu/gemm_out_tile/test_gemm_out_tile.py run that); its use is to catch index errors on a
machine without a GPU. Each function names the step of the kernel it stands for."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.emulation, pytest.mark.extended]

TILES = [(4, 32, False), (2, 64, False), (8, 16, False), (8, 32, True), (4, 64, True),
         (2, 64, True), (4, 32, True)]


@dataclass
class Axis:
    """plan_axis (common/phase_plan.cuh): per phase, taps and off0."""
    stride: int
    step: int
    in_step: int
    taps: list
    off0: list
    rows: list
    first: list  # first kernel index of each phase


def plan_axis(stride: int, pad: int, dil: int, kernel: int, out: int) -> Axis:
    g = math.gcd(stride, dil)
    taps, off0, first = [0] * stride, [0] * stride, [0] * stride
    for k in range(kernel):
        t = k * dil - pad
        ph = t % stride
        if taps[ph] == 0:
            off0[ph] = (ph - t) // stride
            first[ph] = k
        taps[ph] += 1
    rows = [(out - ph + stride - 1) // stride if ph < out else 0 for ph in range(stride)]
    return Axis(stride, stride // g, dil // g, taps, off0, rows, first)


def tf32_split(x: np.ndarray):
    """tf32_hi_lo: hi keeps 11 significant bits (rounded), lo = the rest rounded alike."""
    def tf32(v):
        m, e = np.frexp(v)
        return np.ldexp(np.round(m * 2.0 ** 11) / 2.0 ** 11, e)
    hi = tf32(x)
    return hi, tf32(x - hi)


def pack(w: np.ndarray, groups: int, h: Axis, wa: Axis, E: int, bits16: bool,
         split: bool = False, nblocks: int = 1):
    """gemm_out_tile_pack_weight_kernel: [group][channel block][pair][ks][nt][lane][EL]
    fragments (3xTF32: EL = 4, the TF32 hi pair then the lo pair); pack_geometry_blocks splits
    the C8 chunks into `nblocks` blocks of c8 = ceil(C8 / nblocks) (fewer if that divides)."""
    cin, cout_g = w.shape[0], w.shape[1]
    cin_g = cin // groups
    c8_all = -(-cin_g // E)
    c8 = -(-c8_all // nblocks)
    nblocks = -(-c8_all // c8)
    nt = -(-cout_g // 8)
    prefix, ks = [], 0
    for rh in range(h.stride):
        for rw in range(wa.stride):
            prefix.append(ks)
            ks += -(-(h.taps[rh] * wa.taps[rw] * c8) // 2)
    prefix.append(ks)
    EL = 4 if bits16 or split else 2
    packed = np.zeros((groups, nblocks, ks, nt, 32, EL))
    for g, kb in np.ndindex(groups, nblocks):
        for pr in range(h.stride * wa.stride):
            rh, rw = divmod(pr, wa.stride)
            for k in range(prefix[pr + 1] - prefix[pr]):
                for n_t in range(nt):
                    for lane in range(32):
                        t4, g4 = lane & 3, lane >> 2
                        for j in range(EL):
                            k_in = 2 * t4 + 8 * (j >> 1) + (j & 1) if bits16 else \
                                t4 + 4 * (j & 1)
                            q = 2 * k + k_in // E
                            tap, c = q // c8, (kb * c8 + q % c8) * E + k_in % E
                            n = n_t * 8 + g4
                            if tap < h.taps[rh] * wa.taps[rw] and c < cin_g and n < cout_g:
                                th, tw = divmod(tap, wa.taps[rw])
                                khi = h.first[rh] + th * h.step
                                kwi = wa.first[rw] + tw * wa.step
                                v = w[g * cin_g + c, n, khi, kwi]
                                if split:
                                    v = tf32_split(v)[j >> 1]
                                packed[g, kb, prefix[pr] + k, n_t, lane, j] = v
    return packed, prefix, c8, nt, nblocks


def b_fragment(frag: np.ndarray, bits16: bool, part: int = 0) -> np.ndarray:
    """One (ks, nt) fragment [32][EL] as the B matrix [k][8] the mma sees (3xTF32: part 0 the
    hi fragment, lanes' elements 0-1, part 1 the lo one, elements 2-3)."""
    kdim = 16 if bits16 else 8
    b = np.zeros((kdim, 8))
    for lane in range(32):
        t4, g4 = lane & 3, lane >> 2
        for j in range(4 if bits16 else 2):
            k = 2 * t4 + 8 * (j >> 1) + (j & 1) if bits16 else t4 + 4 * j
            b[k, g4] = frag[lane, j + 2 * part]
    return b


def run_model(x: np.ndarray, w: np.ndarray, bias, stride, padding, dilation, groups, out_hw,
              tile, bits16: bool, split: bool = False, nblocks: int = 1) -> np.ndarray:
    batch, cin, ih_n, iw_n = x.shape
    cout_g = w.shape[1]
    cin_g = cin // groups
    oh_n, ow_n = out_hw
    E = 8 if bits16 else 4
    h = plan_axis(stride[0], padding[0], dilation[0], w.shape[2], oh_n)
    wa = plan_axis(stride[1], padding[1], dilation[1], w.shape[3], ow_n)
    packed, prefix, c8, nt, nblocks = pack(w, groups, h, wa, E, bits16, split, nblocks)
    cp = c8 * E
    mi, mj, all_rows = tile
    cols = [(wa.off0[r] - (wa.taps[r] - 1) * wa.in_step, wa.off0[r])
            for r in range(wa.stride) if wa.taps[r]]
    cmin = min(c[0] for c in cols) if cols else 0
    fc = mj + max(c[1] for c in cols) - cmin if cols else 0
    row_groups = 1 if all_rows else h.stride
    row_blocks = -(-(-(-oh_n // h.stride)) // mi)
    col_blocks = -(-(-(-ow_n // wa.stride)) // mj)
    out = np.full((batch, cout_g * groups, oh_n, ow_n), np.nan)
    sr = h.stride * mi if all_rows else mi
    tw_cols = wa.stride * mj
    for g in range(groups):
        for n_img in range(batch):
            for rg in range(row_groups):
                for rb in range(row_blocks):
                    for cb in range(col_blocks):
                        rh_begin, rh_count = (0, h.stride) if all_rows else (rg, 1)
                        i0, j0 = rb * mi, cb * mj
                        if not all_rows and i0 >= h.rows[rh_begin]:
                            continue
                        rr = [(h.off0[r] - (h.taps[r] - 1) * h.in_step, h.off0[r])
                              for r in range(rh_begin, rh_begin + rh_count) if h.taps[r]]
                        rmin = min(r[0] for r in rr) if rr else 0
                        fr = mi + max(r[1] for r in rr) - rmin if rr else 0
                        # Footprint [fr][fc][cp], zero outside the input / padded channels.
                        # One footprint per channel block: channels [kb*cp, (kb+1)*cp).
                        fps = []
                        for kb in range(nblocks):
                            fp = np.zeros((max(fr, 1), max(fc, 1), cp))
                            c_lo, c_hi = kb * cp, min(cin_g, (kb + 1) * cp)
                            for a in range(fr):
                                for c in range(fc):
                                    iy, ix = i0 + rmin + a, j0 + cmin + c
                                    if 0 <= iy < ih_n and 0 <= ix < iw_n:
                                        fp[a, c, :c_hi - c_lo] = \
                                            x[n_img, g * cin_g + c_lo:g * cin_g + c_hi, iy, ix]
                            fps.append(fp)
                        st = np.full((sr, tw_cols, cout_g), np.nan)
                        pair0 = rh_begin * wa.stride
                        for pr in range(rh_count * wa.stride):
                            rh, rw = rh_begin + pr // wa.stride, pr % wa.stride
                            chunks = h.taps[rh] * wa.taps[rw] * c8
                            # Chunk table: (row, col, channel offset) per chunk.
                            tab = []
                            for q in range(chunks):
                                tap, cc = divmod(q, c8)
                                th, tw = divmod(tap, wa.taps[rw])
                                tab.append((h.off0[rh] - th * h.in_step - rmin,
                                            wa.off0[rw] - tw * wa.in_step - cmin, cc * E))
                            kp = prefix[pair0 + pr]
                            ks_n = prefix[pair0 + pr + 1] - kp
                            for mt in range(mi * mj // 16):
                                acc = np.zeros((16, nt * 8))
                                for kb, ks in np.ndindex(nblocks, ks_n):
                                    fp = fps[kb]
                                    # ldmatrix.x4: lanes give rows (pixel arow, chunk ahalf).
                                    a_mat = np.zeros((16, 2 * E))
                                    for lane in range(32):
                                        arow = (lane & 7) | (lane & 8)
                                        half = lane >> 4
                                        q = min(2 * ks + half, chunks - 1)
                                        pix = mt * 16 + arow
                                        dr, dc, co = tab[q]
                                        # Inside the footprint (numpy would wrap negatives).
                                        assert 0 <= pix // mj + dr < fr and \
                                            0 <= pix % mj + dc < fc and co + E <= cp
                                        a_mat[arow, half * E:(half + 1) * E] = \
                                            fp[pix // mj + dr, pix % mj + dc, co:co + E]
                                    if 2 * ks + 1 >= chunks:
                                        a_mat[:, E:] = 0
                                    for n_t in range(nt):
                                        frag = packed[g, kb, kp + ks, n_t]
                                        b = b_fragment(frag, bits16)
                                        if split:  # small terms first, then hi * hi
                                            a_hi, a_lo = tf32_split(a_mat)
                                            b_lo = b_fragment(frag, bits16, part=1)
                                            part = a_lo @ b + a_hi @ b_lo + a_hi @ b
                                        else:
                                            part = a_mat @ b
                                        acc[:, n_t * 8:(n_t + 1) * 8] += part
                                for r in range(16):
                                    pp = mt * 16 + r
                                    a_row, jj = divmod(pp, mj)
                                    s = rh + h.stride * a_row if all_rows else a_row
                                    xs = rw + wa.stride * jj
                                    for n in range(cout_g):
                                        b_n = 0.0 if bias is None else bias[g * cout_g + n]
                                        st[s, xs, n] = acc[r, n] + b_n
                        # Run stores.
                        oh_first = h.stride * i0 if all_rows else rh_begin + h.stride * i0
                        oh_step = 1 if all_rows else h.stride
                        x0 = wa.stride * j0
                        for s in range(sr):
                            oh = oh_first + s * oh_step
                            if oh >= oh_n:
                                continue
                            for xs in range(min(tw_cols, ow_n - x0)):
                                out[n_img, g * cout_g:(g + 1) * cout_g, oh, x0 + xs] = st[s, xs]
    return out


def random_layer(seed: int):
    rng = random.Random(seed)
    stride = (rng.choice((1, 2, 3, 4, 8)), rng.choice((1, 2, 3, 5)))
    dil = (rng.choice((1, 1, 2, 3)), rng.choice((1, 1, 2)))
    kernel = (rng.randint(1, 5), rng.randint(1, 9))
    pad = (rng.randint(0, 3), rng.randint(0, 3))
    opad = tuple(rng.randint(0, max(s, d) - 1) for s, d in zip(stride, dil))
    groups = rng.choice((1, 1, 2))
    cin_g, cout_g = rng.choice((1, 3, 8, 9, 16)), rng.choice((1, 3, 8, 9, 17))
    hw = (rng.randint(1, 9), rng.randint(1, 12))
    return stride, dil, kernel, pad, opad, groups, cin_g, cout_g, hw


def _check_model(seed: int, layer, tile, bits16: bool, nblocks: int = 1) -> None:
    """run_model on fresh float64 data for `layer` (random_layer's tuple) against PyTorch,
    every element, to 1e-9."""
    stride, dil, kernel, pad, opad, groups, cin_g, cout_g, hw = layer
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, cin_g * groups, *hw, generator=gen, dtype=torch.float64)
    w = torch.randn(cin_g * groups, cout_g, *kernel, generator=gen, dtype=torch.float64)
    b = torch.randn(cout_g * groups, generator=gen, dtype=torch.float64)
    try:
        ref = F.conv_transpose2d(x, w, b, stride, pad, opad, groups, dil)
    except RuntimeError:
        pytest.skip("PyTorch rejects these hyperparameters")
    got = run_model(x.numpy(), w.numpy(), b.numpy(), stride, pad, dil, groups,
                    tuple(ref.shape[-2:]), tile, bits16=bits16, nblocks=nblocks)
    assert not np.isnan(got).any(), "unwritten output elements"
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("seed", range(80))
def test_out_tile_model_matches_pytorch(seed):
    _check_model(seed, random_layer(seed), TILES[seed % len(TILES)], bits16=seed % 2 == 0)


@pytest.mark.parametrize("seed", range(30))
def test_out_tile_channel_blocks_model_matches_pytorch(seed):
    """The K loop over channel blocks (layers whose weights do not fit shared memory at once):
    the packed weight's [block][pair][ks] order, each block's footprint and the accumulation
    across blocks, with block counts that divide the chunks and that leave a partial last
    block."""
    layer = list(random_layer(seed + 900))
    rng = random.Random(seed)
    layer[6] = cin_g = rng.choice((17, 24, 40, 64))
    bits16 = seed % 2 == 0
    assert -(-cin_g // (8 if bits16 else 4)) >= 2, "more than one chunk, so the blocks are real"
    _check_model(seed, tuple(layer), TILES[seed % 3], bits16, nblocks=rng.choice((2, 3, 5)))


@pytest.mark.parametrize("seed", range(24))
def test_out_tile_3xtf32_model_matches_pytorch(seed):
    """fp32 strict (3xTF32): the hi / lo fragment order of the packed weight and the split A
    operand. hi + lo carries 22 of fp32's 24 bits, so each product is within ~2^-21 of the
    exact one (the model sums in float64); a wrong lane map would miss by O(1)."""
    stride, dil, kernel, pad, opad, groups, cin_g, cout_g, hw = random_layer(seed + 500)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, cin_g * groups, *hw, generator=gen, dtype=torch.float64)
    w = torch.randn(cin_g * groups, cout_g, *kernel, generator=gen, dtype=torch.float64)
    try:
        ref = F.conv_transpose2d(x, w, None, stride, pad, opad, groups, dil)
    except RuntimeError:
        pytest.skip("PyTorch rejects these hyperparameters")
    got = run_model(x.numpy(), w.numpy(), None, stride, pad, dil, groups, tuple(ref.shape[-2:]),
                    TILES[seed % len(TILES)], bits16=False, split=True)
    assert not np.isnan(got).any(), "unwritten output elements"
    bound = 1e-5 * float(F.conv_transpose2d(x.abs(), w.abs(), None, stride, pad, opad, groups,
                                            dil).max())
    np.testing.assert_allclose(got, ref.numpy(), rtol=0, atol=bound)
    # The TF32-only model (hi * hi alone) misses that bound: the lo terms are really used.
    coarse = run_model(*[tf32_split(a)[0] for a in (x.numpy(), w.numpy())], None, stride, pad,
                       dil, groups, tuple(ref.shape[-2:]), TILES[seed % len(TILES)],
                       bits16=False)
    if x.numel() and float(np.abs(coarse - ref.numpy()).max()) > 0:
        assert float(np.abs(got - ref.numpy()).max()) < float(np.abs(coarse - ref.numpy()).max())
