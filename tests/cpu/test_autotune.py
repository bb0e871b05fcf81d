"""The autotune cache: keys, persistence, export/import, the candidate runner (the timed choice
on the GPU: tests/gpu/test_autotune.py)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from deconv_patch import kernels
from deconv_patch.kernels import autotune, device_info, planner
from deconv_patch.arguments import ConvTransposeArgs
from deconv_patch.kernels.autotune import AutotuneCache
from deconv_patch.epilogue import IDENTITY, Epilogue
from deconv_patch.ops import _candidate_runner


def test_cache_persists_and_round_trips(tmp_path):
    path = tmp_path / "autotune.json"
    first = AutotuneCache(path)
    first.record("k1", "gemm_kxs")
    assert json.loads(path.read_text())["choices"] == {"k1": "gemm_kxs"}
    second = AutotuneCache(path)
    assert second.choices == {"k1": "gemm_kxs"}
    other = AutotuneCache(None)
    other.import_(second.export())
    assert other.choices == second.choices
    with pytest.raises(ValueError):
        other.import_({"choices": ["not", "a", "mapping"]})


def test_unreadable_cache_file_is_ignored(tmp_path):
    path = tmp_path / "autotune.json"
    path.write_text("{not json")
    assert AutotuneCache(path).choices == {}


def test_autotune_is_off_unless_cudnn_benchmark():
    with torch.backends.cudnn.flags(enabled=True, benchmark=False):
        assert not autotune.enabled()


@pytest.mark.parametrize("bursts,single,expected", [
    ((1.00, 1.10), (1.00, 1.05), "gemm_kxs"),  # wins in bursts and one call at a time
    ((1.00, 1.10), (1.00, 1.00), "aten"),      # wins in bursts, ties one call at a time
    ((1.00, 1.10), (1.00, 1.02), "aten"),      # one call at a time below the 3% margin
    ((1.00, 1.01), None, "aten"),              # burst win below the 3% margin
    ((1.20, 1.00), None, "aten"),              # loses in bursts
    ((1.00, 1.10), (1.05, 1.00), "aten"),      # wins in bursts, slower one call at a time
])
def test_pick_confirms_a_kernel_head_to_head_before_it_replaces_pytorch(
        tmp_path, monkeypatch, bursts, single, expected):
    """The first, all-candidate round says gemm_kxs is 20% faster; the head-to-head re-timings
    decide: the kernel must still win by the 3% margin in bursts, then by the same margin one
    call at a time (a single call per sample, not a burst): a tie keeps PyTorch's path."""
    monkeypatch.setattr(autotune, "_CACHE", AutotuneCache(tmp_path / "a.json"))
    rounds = []

    def fake_timing(fns, warmup, reps):
        calls.clear()
        fns[0]()
        rounds.append((len(fns), len(calls)))  # candidates, calls per sample of the first
        if len(rounds) == 1:  # gemm_kxs, gemm_phase:64x64, aten
            return [[1.0] * reps, [1.1] * reps, [1.2] * reps]
        times = bursts if len(rounds) == 2 else single
        return [[times[0]] * reps, [times[1]] * reps]

    monkeypatch.setattr(autotune, "time_interleaved", fake_timing)
    calls = []
    best = autotune.pick("key", ("gemm_kxs", "gemm_phase:64x64", "aten"), calls.append)
    burst = autotune._BURST
    assert best == expected
    assert rounds == [(3, burst), (2, burst)] + ([(2, 1)] if single else [])
    assert autotune.cache().choices["key"] == expected


def test_pick_keeps_pytorch_without_a_confirmation_round_when_it_wins(tmp_path, monkeypatch):
    monkeypatch.setattr(autotune, "_CACHE", AutotuneCache(tmp_path / "a.json"))
    rounds = []

    def fake_timing(fns, warmup, reps):
        rounds.append(len(fns))
        return [[1.0] * reps, [0.9] * reps]

    monkeypatch.setattr(autotune, "time_interleaved", fake_timing)
    assert autotune.pick("key", ("gemm_kxs", "aten"), lambda v: None) == "aten"
    assert rounds == [2]


def test_pick_times_bursts_of_back_to_back_calls_of_one_candidate(tmp_path, monkeypatch):
    """A timed sample is _BURST calls of the same variant in a row (throughput, as inside a
    model), after the warm-up calls."""
    monkeypatch.setattr(autotune, "_CACHE", AutotuneCache(tmp_path / "a.json"))
    calls = []

    def fake_timing(fns, warmup, reps):
        before = len(calls)
        fns[1]()
        sample = calls[before:]
        assert sample == ["aten"] * autotune._BURST
        return [[1.0] * reps, [0.9] * reps]

    monkeypatch.setattr(autotune, "time_interleaved", fake_timing)
    assert autotune.pick("key", ("gemm_kxs", "aten"), calls.append) == "aten"
    assert calls[:2 * autotune._WARMUP] == ["gemm_kxs"] * autotune._WARMUP + \
        ["aten"] * autotune._WARMUP
    assert autotune._BURST > 1


def test_call_key_tells_fused_epilogues_apart(monkeypatch):
    """A fused activation can make one kernel far slower than another (gemm_phase_tma's Tanh,
    H100), so each epilogue is timed on its own; a plain call keeps its epilogue-free key."""
    monkeypatch.setattr(autotune, "_device_name", lambda index: "GPU")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # (CPU tensors: no index)
    x, w = torch.randn(2, 8, 5, 5), torch.randn(8, 4, 4, 4)
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    plain = autotune.call_key(x, w, True, args)
    assert "epilogue" not in plain and autotune.call_key(x, w, True, args, IDENTITY) == plain
    keys = {plain}
    for epi in (Epilogue(activation="relu"), Epilogue(activation="tanh"),
                Epilogue(activation="leaky_relu", negative_slope=0.2),
                Epilogue(activation="leaky_relu", negative_slope=0.1),
                Epilogue(scale=torch.ones(4), activation="relu"),
                Epilogue(scale=torch.ones(4), shift=torch.zeros(4), activation="relu")):
        key = autotune.call_key(x, w, True, args, epi)
        assert key.startswith(plain + "|") and key not in keys
        keys.add(key)
    same_values = Epilogue(scale=torch.full((4,), 3.0), activation="relu")
    assert autotune.call_key(x, w, True, args, same_values) == \
        autotune.call_key(x, w, True, args, Epilogue(scale=torch.ones(4), activation="relu"))


def test_candidate_runner_times_pytorch_with_the_epilogue_applied():
    """autotune's `aten` candidate is what the patched layer runs on PyTorch's path: the
    convolution, then the fused epilogue (checked on the CPU, where only that path exists)."""
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 8, 5, 5), torch.randn(8, 4, 4, 4), torch.randn(4)
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    scale, shift = torch.rand(4) + 0.5, torch.randn(4)
    for epi in (IDENTITY, Epilogue(activation="tanh"),
                Epilogue(scale=scale, shift=shift, activation="leaky_relu", negative_slope=0.3)):
        got = _candidate_runner(x, w, b, args, epi)(planner.ATEN)
        conv = F.conv_transpose2d(x.double(), w.double(), b.double(), 2, 1)
        if epi.scale is not None:
            conv = conv * scale.double().view(1, -1, 1, 1) + shift.double().view(1, -1, 1, 1)
        want = {"none": lambda t: t, "tanh": torch.tanh,
                "leaky_relu": lambda t: F.leaky_relu(t, 0.3)}[epi.activation](conv)
        assert (got.double() - want).abs().max() < 1e-5


def test_timing_compiles_the_candidates_units_at_once_before_the_first_candidate(monkeypatch):
    """With autotune on, a call whose choice is not cached loads its candidates' build units
    (for the call's fused activation) in one go (they compile at once) before pick() times
    the candidates, instead of one family at a time as each candidate first runs; a cached
    choice loads nothing."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from deconv_patch import kernel_calls

    loads, picks = [], []
    monkeypatch.setattr(kernel_calls, "load_units", lambda units: loads.append(list(units)))
    monkeypatch.setattr(autotune, "enabled", lambda: True)
    monkeypatch.setattr(autotune, "call_key", lambda *args: "key")
    monkeypatch.setattr(autotune, "pick", lambda key, candidates, run: picks.append(
        (len(loads), tuple(candidates))) or candidates[0])
    monkeypatch.setattr(device_info, "capability", lambda index: (9, 0))
    monkeypatch.setattr(device_info, "multiprocessors", lambda index: 132)
    with FakeTensorMode():
        x = torch.empty(2, 64, 8, 8, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(64, 32, 4, 4, device="cuda", dtype=torch.bfloat16)
    args = ConvTransposeArgs.from_values(stride=2, padding=1)
    monkeypatch.setattr(autotune, "known", lambda key, candidates: False)
    kernel_calls._plan_call(x, w, None, args, Epilogue(activation="relu"))
    assert picks[0][0] == 1 and len(picks[0][1]) > 1  # loaded before timing, several candidates
    families = {kernels.family_of(v) for v in picks[0][1]} - {None}
    assert len(families) > 2
    assert loads == [sorted({u for f in families for u in f.units_for("relu", torch.bfloat16)})]
    # the per-activation families' ReLU units of bf16, the others' bf16 units, not their whole
    # folders
    assert "gemm_phase_tma@relu.bf16" in loads[0] and "gemm_phase_tma" not in loads[0]
    assert all(unit.endswith(".bf16") for unit in loads[0])
    monkeypatch.setattr(autotune, "known", lambda key, candidates: True)
    kernel_calls._plan_call(x, w, None, args, IDENTITY)
    assert len(loads) == 1 and len(picks) == 2
