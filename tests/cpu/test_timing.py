"""The order in which timed fns take turns (deconv_patch.timing.turn_orders)."""

import itertools
from collections import Counter

import pytest

from deconv_patch.timing import turn_orders


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
