"""PackedWeightCache semantics on the CPU (the extension's pack_weight replaced by a recorder):
one pack per weight, layout and TF32 flag; a re-pack after an in-place update; none otherwise."""

from __future__ import annotations

import torch

from deconv_patch.kernels import packed_weights
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.kernels.packed_weights import LayoutKey, PackedWeightCache


class _Recorder:
    def __init__(self) -> None:
        self.calls = []

    def pack_weight(self, variant, weight, stride, padding, output_padding, dilation, groups,
                    allow_tf32):
        self.calls.append((variant, tuple(stride), allow_tf32))
        return weight.flip(0).clone()  # any re-layout: a copy that differs from the weight


def test_layout_key_compares_by_value_and_hashes_once():
    args = ConvTransposeArgs.from_values(2, 1, 0, 1, 1)
    same = LayoutKey("gemm_phase", ConvTransposeArgs.from_values(2, 1, 0, 1, 1), True)
    assert LayoutKey("gemm_phase", args, True) == same
    assert hash(LayoutKey("gemm_phase", args, True)) == hash(same)
    assert LayoutKey("gemm_phase", args, False) != same
    assert LayoutKey("gemm_kxs", args, True) != same


def test_one_pack_per_weight_version_and_layout(monkeypatch):
    recorder = _Recorder()
    units = []
    monkeypatch.setattr(packed_weights, "load_family_any",
                        lambda family, asked: units.append((family, tuple(asked))) or recorder)
    cache = PackedWeightCache()
    w = torch.randn(4, 3, 2, 2)
    args = ConvTransposeArgs.from_values(2, 0, 0, 1, 1)
    key = LayoutKey("gemm_kxs", args, True)
    first = cache.get("gemm_kxs", w, args, True, key)
    assert cache.get("gemm_kxs", w, args, True, key) is first  # hit: no re-pack
    assert cache.get("gemm_kxs", w, args, True) is first        # same layout, key made here
    assert len(recorder.calls) == 1
    cache.get("gemm_kxs", w, args, False)                       # other TF32 flag: own pack
    assert len(recorder.calls) == 2
    with torch.no_grad():
        w.mul_(2.0)                                             # in place: version bump
    again = cache.get("gemm_kxs", w, args, True, key)
    assert len(recorder.calls) == 3 and torch.equal(again, w.flip(0))
    other = torch.randn(4, 3, 2, 2)                             # another weight tensor
    cache.get("gemm_kxs", other, args, True, key)
    assert len(recorder.calls) == 4 and cache.packs == 4
    # packing loads a unit of the family's own (gemm_kxs: one per element type, every
    # activation)
    assert set(units) == {("gemm_kxs", ("gemm_kxs.f32",))}


def test_each_stream_gets_its_own_pack(monkeypatch):
    """A pack is read only on the stream that made it (kept_buffers.stream_key): another stream
    could read it before the pack ran. The current stream is stood in for here; on the GPU,
    tests/gpu/test_streams.py runs the race itself."""
    recorder = _Recorder()
    monkeypatch.setattr(packed_weights, "load_family_any", lambda family, asked: recorder)
    stream = [7]
    monkeypatch.setattr(packed_weights, "stream_key", lambda device: stream[0])
    cache = PackedWeightCache()
    w = torch.randn(4, 3, 2, 2)
    args = ConvTransposeArgs.from_values(2, 0, 0, 1, 1)
    on_7 = cache.get("gemm_kxs", w, args, True)
    assert cache.get("gemm_kxs", w, args, True) is on_7 and len(recorder.calls) == 1
    stream[0] = 9
    on_9 = cache.get("gemm_kxs", w, args, True)
    assert on_9 is not on_7 and len(recorder.calls) == 2
    stream[0] = 7
    assert cache.get("gemm_kxs", w, args, True) is on_7 and len(recorder.calls) == 2
