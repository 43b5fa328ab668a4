"""A plan's rollouts are held as columns of integers (``rows.planned.PlannedRollouts``): a run of a
million rollouts holds them in some 15 MB through its dispatch, not 145 MB of ``PlannedRollout``
objects, and every consumer still sees each one as a ``PlannedRollout``."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from pytest_rollouts.config.settings import Settings
from pytest_rollouts.plan.build import materialize
from pytest_rollouts.plan.datasets import Task
from pytest_rollouts.rows.planned import PlannedRollout, PlannedRollouts
from pytest_rollouts.store.artifacts import RowsDigest, rows_digest

from ..helpers import tasks, write_rows


def test_a_plan_holds_its_rollouts_in_bytes_each_not_in_objects(tmp_path: Path) -> None:
    """What the plan's rollouts hold is what letting them go frees: at 10k rollouts (as at 50k:
    what the columns hold besides is a few hundred bytes), under 40 bytes a rollout (a
    ``PlannedRollout`` and the ints only it holds took some 145)."""
    rows, repeats = 625, 16
    data = write_rows(tmp_path / "data.jsonl", tasks(rows))
    offsets = [0]
    for line in data.read_bytes().splitlines(keepends=True)[:-1]:
        offsets.append(offsets[-1] + len(line))
    planned = [Task("data.jsonl", data, offsets[i], i, "policy", 0, repeats, False, i, i) for i in range(rows)]
    tracemalloc.start()
    try:
        plan = materialize(planned, tmp_path / "m.jsonl", Settings())
        rollouts = plan.rollouts
        assert len(rollouts) == rows * repeats
        del plan
        held = tracemalloc.get_traced_memory()[0]
        del rollouts
        freed = held - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert freed / (rows * repeats) < 40


def test_each_rollout_reads_back_as_it_was_planned() -> None:
    """Indexing and iteration give back every field as appended: agents by name, the flags, and
    values past what a column held before (an offset past 4 GB widens its column)."""
    given = [
        PlannedRollout(0, 0, 0, "b", 0, 10),
        PlannedRollout(1, 300, 2, "a", 70_000, 12, first_attempt=3, episode=True),
        PlannedRollout(2, 70_000, 1, "b", 5 << 32, 1 << 20, via_server=True),
        PlannedRollout(1, 300, 3, "c", (5 << 32) + 1, 9),
    ]
    rollouts = PlannedRollouts(given[:2])
    for rollout in given[2:]:
        rollouts.append(rollout)
    assert len(rollouts) == 4
    assert list(rollouts) == given
    assert [rollouts[i] for i in range(-4, 4)] == given + given
    assert rollouts.agents() == {"a", "b", "c"}
    rollouts.clear()
    assert (len(rollouts), list(rollouts), rollouts.agents()) == (0, [], set())


def test_sorting_by_task_keeps_the_plan_order_among_equal_keys_as_list_sort_does() -> None:
    """The resume's longest-first order: tasks by their key, interleaved repeats of tasks with
    equal keys left interleaved."""
    given = [
        PlannedRollout(task, task, repeat, "a", 100 * task + repeat, 5) for repeat in range(3) for task in range(6)
    ]
    longest = {1: 2.0, 4: 2.0, 5: 9.0}
    rollouts = PlannedRollouts(given)
    rollouts.sort_by_task(lambda task_index: -longest.get(task_index, 0.0))
    assert list(rollouts) == sorted(given, key=lambda r: -longest.get(r.task_index, 0.0))


def test_the_digest_taken_as_rows_are_written_is_that_of_the_file(tmp_path: Path) -> None:
    """The manifest's ``materialized_digest`` is taken as materializing writes each line, not read
    back from the file: it must be the one a resume computes from the file (``rows_digest``), or
    every resume of a fresh run would refuse its own materialized inputs."""
    data = write_rows(tmp_path / "data.jsonl", tasks(5))
    offsets = [0]
    for line in data.read_bytes().splitlines(keepends=True)[:-1]:
        offsets.append(offsets[-1] + len(line))
    planned = [Task("data.jsonl", data, offsets[i], i, "policy", 0, 2, False, i, i) for i in range(5)]
    digest = RowsDigest()
    materialize(planned, tmp_path / "m.jsonl", Settings(repeats_add_seed=True), digest=digest)
    assert digest.hex() == rows_digest(tmp_path / "m.jsonl")
    assert digest.hex() != RowsDigest().hex()
