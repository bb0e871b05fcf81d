"""How deconv_patch.timing times: the order in which timed fns take turns, the garbage
collector while they run, and the A/A control's copy."""

import copy
import gc
import itertools
from collections import Counter

import pytest
import torch

from deconv_patch import timing
from deconv_patch.timing import control_copy, turn_orders


def test_two_fns_alternate_as_without_rotation():
    assert turn_orders(2) == turn_orders(2, rotate=True) == [[0, 1], [1, 0]]


@pytest.mark.parametrize("count", [3, 4, 5])
def test_rotated_orders_put_each_fn_in_each_place_equally_often(count):
    orders = turn_orders(count, rotate=True)
    assert all(sorted(order) == list(range(count)) for order in orders)
    places = Counter((fn, place) for order in orders for place, fn in enumerate(order))
    assert len(places) == count * count
    assert set(places.values()) == {len(orders) // count}


def test_three_rotated_fns_take_every_order_so_each_follows_each_other_equally_often():
    orders = turn_orders(3, rotate=True)
    assert sorted(map(tuple, orders)) == sorted(itertools.permutations(range(3)))
    after = Counter((a, b) for order in orders for a, b in zip(order, order[1:]))
    assert len(after) == 6 and set(after.values()) == {2}


def test_without_rotation_the_middle_fn_never_moves():
    orders = turn_orders(3)
    assert orders == [[0, 1, 2], [2, 1, 0]]
    assert {order[1] for order in orders} == {1}


class _FakeEvent:
    """Stands in for torch.cuda.Event on a machine without a GPU: 1 ms between any two."""

    def __init__(self, enable_timing: bool = False) -> None:
        pass

    def record(self) -> None:
        pass

    def elapsed_time(self, end: "_FakeEvent") -> float:
        return 1.0


@pytest.fixture
def fake_cuda_events(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)


def test_the_collector_is_off_while_timed_calls_run_and_back_on_after(fake_cuda_events):
    seen = []
    assert gc.isenabled()
    times = timing.time_interleaved([lambda: seen.append(("a", gc.isenabled())),
                                     lambda: seen.append(("b", gc.isenabled()))],
                                    warmup=2, reps=5, rotate=True)
    assert times == [[1.0] * 5, [1.0] * 5]
    assert seen[:4] == [("a", True), ("b", True)] * 2  # warm-up: as the caller left it
    assert sorted(seen[4:]) == [("a", False)] * 5 + [("b", False)] * 5
    assert gc.isenabled()


def test_a_failing_timed_call_turns_the_collector_back_on(fake_cuda_events):
    calls = []

    def fails_on_third_call():
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        timing.time_interleaved([fails_on_third_call], warmup=1, reps=4)
    assert gc.isenabled()


def test_a_caller_that_turned_the_collector_off_keeps_it_off(fake_cuda_events):
    gc.disable()
    try:
        timing.time_interleaved([lambda: None], warmup=1, reps=2)
        assert not gc.isenabled()
    finally:
        gc.enable()


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.ConvTranspose2d(3, 4, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def _cache_entries(fn) -> int:
    return len(torch._C._dynamo.eval_frame._debug_get_cache_entry_list(fn.__code__))


def test_the_control_copy_computes_as_the_original_under_its_own_compiled_entry():
    torch.manual_seed(0)
    original = _Net()
    control = control_copy(original)
    assert isinstance(control, _Net) and type(control) is not _Net
    assert type(control).__name__ == "_Net" and type(control).__qualname__ == _Net.__qualname__
    assert all(a is not b and torch.equal(a, b)
               for a, b in zip(original.parameters(), control.parameters()))
    x = torch.randn(2, 3, 5, 7)
    assert torch.equal(control(x), original(x))

    torch._dynamo.reset()
    try:
        compiled = [torch.compile(m, backend="eager") for m in
                    (original, control, copy.deepcopy(original))]
        outs = [c(x) for c in compiled]
        # The plain deepcopy runs the original's entry; the control made its own.
        assert _cache_entries(_Net.forward) == 2
        assert all(torch.equal(o, outs[0]) for o in outs)
    finally:
        torch._dynamo.reset()
