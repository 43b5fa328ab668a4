"""The plan's index of materialized keys answers as the dict it replaces, whatever order keys come in."""

from __future__ import annotations

import random

import pytest

from pytest_rollouts.rows.key_index import KeyIndex


def _orders(seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    tasks = rng.sample(range(50), 12)
    repeats = {t: rng.choice([1, 3, 4]) for t in tasks}
    start = {t: rng.choice([0, 0, 2]) for t in tasks}  # a fanned-out agent's indices start past another's
    by_task = [(t, start[t] + r) for t in tasks for r in range(repeats[t])]
    interleaved = [(t, start[t] + r) for r in range(4) for t in tasks if r < repeats[t]]
    shuffled = by_task[:]
    rng.shuffle(shuffled)
    gaps = [(t, r) for t, r in by_task if r % 2 == 0]
    return [by_task, sorted(by_task), interleaved, shuffled, gaps]


@pytest.mark.parametrize("seed", range(20))
def test_it_answers_as_a_dict_whatever_the_order_keys_are_added_in(seed: int) -> None:
    rng = random.Random(seed)
    for keys in _orders(seed):
        index, plain = KeyIndex(), {}
        for key in keys + rng.sample(keys, len(keys) // 3):  # a key set again keeps its first place
            offset = rng.randrange(10**9)
            index[key] = plain[key] = offset
        assert dict(index) == plain and list(index) == list(plain) and len(index) == len(plain)
        for task in range(-1, 52):
            for rollout in range(-1, 8):
                assert ((task, rollout) in index) == ((task, rollout) in plain)
                assert index.position((task, rollout)) == (
                    list(plain).index((task, rollout)) if (task, rollout) in plain else None
                )
        assert [index.key(at) for at in index.in_key_order()] == sorted(plain)
        lowest = {}
        for task, rollout in plain:
            lowest[task] = min(lowest.get(task, rollout), rollout)
        assert {task: index.key(at)[1] for task, at in index.lowest_positions().items()} == lowest
    with pytest.raises(KeyError):
        KeyIndex()[0, 0]
