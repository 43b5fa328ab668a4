"""A run's rollouts read from its files for the report: what became of each materialized rollout,
its reward, latency and answer, and what the page shows when it is opened.

The materialized inputs are the denominator, as in scoring: every rollout the run meant to make
is a row of the report, a result, a failure (its latest attempt, as scoring takes it) or no row
at all. Results are appended as rollouts complete, so their order in the output file is the run's
completion order, the time axis of "latency over the run".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from pytest_rollouts.datatype import datatype
from pytest_rollouts.report.rollouts import (
    SNIPPET_CAP,
    capped,
    failure_of,
    final_answer,
    number,
    output_items,
    prompt_of,
    task_fields,
    verifier_fields,
)
from pytest_rollouts.rows.fronting import recorded_fronted_by
from pytest_rollouts.rows.records import NO_REWARD, is_masked, metrics_group, reward_of
from pytest_rollouts.rows.resume import key_of
from pytest_rollouts.rows.schema import ELAPSED, FAILURE_CLASS
from pytest_rollouts.scoring.accounting import MASKED, NO_ROW
from pytest_rollouts.scoring.pairing import TASK_ID_FIELDS
from pytest_rollouts.store.artifacts import ArtifactPaths, read_rows

# The status of a rollout with a scored result; the others are accounting's words and the classes.
SCORED = "scored"


@datatype
class Rollout:
    """One materialized rollout and what the run made of it."""

    task: int
    rollout: int
    group: str
    status: str = NO_ROW
    reward: float | None = None
    latency: float | None = None
    # Attempts recorded for it: failure rows, and its result.
    attempts: int = 0
    answer: str = ""
    items: list[list[str]] = field(default_factory=list)
    fields: list[list[str]] = field(default_factory=list)
    failure: list[list[str]] = field(default_factory=list)


@datatype
class Task:
    """What a task's rollouts share: the prompt and the dataset's fields (of its first rollout)."""

    prompt: list[list[str]]
    fields: list[list[str]]
    # Its name in a paired comparison: a task id field's value, else its index.
    label: str


@datatype
class RunData:
    out: Path
    # In the materialized file's order: the run's dispatch order.
    rollouts: list[Rollout]
    tasks: dict[int, Task]
    # Indices into ``rollouts`` of the results, in the order they completed.
    completed: list[int]


def gather(out: Path) -> RunData:
    """Read the run at ``out`` (``<stem>.jsonl``); ``FileNotFoundError`` names a missing
    materialized inputs file, ``JsonlError`` a bad line."""
    paths = ArtifactPaths(out)
    if not paths.materialized.is_file():
        raise FileNotFoundError(f"{paths.materialized} is not there: name a run's <stem>.jsonl")
    rollouts: list[Rollout] = []
    tasks: dict[int, Task] = {}
    where: dict[tuple[int, int], int] = {}
    front = recorded_fronted_by(paths)
    for row in read_rows(paths.materialized):
        key = key_of(row)
        if key in where:
            continue
        where[key] = len(rollouts)
        rollouts.append(Rollout(key[0], key[1], metrics_group(row, front)))
        if key[0] not in tasks:
            tasks[key[0]] = Task(prompt_of(row), task_fields(row), _label(row, key[0]))
    for row in read_rows(paths.failures):
        index = where.get(key_of(row))
        if index is not None:
            _failed(rollouts[index], row)
    completed = []
    for row in read_rows(out):
        index = where.get(key_of(row))
        if index is not None and rollouts[index].status not in (SCORED, MASKED, NO_REWARD):
            _succeeded(rollouts[index], row)
            completed.append(index)
    return RunData(out, rollouts, tasks, completed)


def _failed(rollout: Rollout, row: Mapping[str, Any]) -> None:
    """A failed attempt: the latest one stands, as scoring's accounting takes it."""
    rollout.status = str(row.get(FAILURE_CLASS))
    rollout.attempts += 1
    rollout.latency = number(row.get(ELAPSED))
    rollout.failure = failure_of(row)
    rollout.reward = reward_of(row)  # an agent-classified failure may carry its verifier's reward
    _reply(rollout, row)


def _succeeded(rollout: Rollout, row: Mapping[str, Any]) -> None:
    """A result: it stands whatever failed before it (the earlier failure stays shown)."""
    reward = reward_of(row)
    rollout.status = MASKED if is_masked(row) else NO_REWARD if reward is None else SCORED
    rollout.reward = reward
    rollout.attempts += 1
    rollout.latency = number(row.get(ELAPSED))
    _reply(rollout, row)


def _reply(rollout: Rollout, row: Mapping[str, Any]) -> None:
    rollout.items = output_items(row.get("response"))
    rollout.fields = verifier_fields(row)
    rollout.answer = capped(final_answer(row.get("response")).strip(), SNIPPET_CAP)


def _label(row: Mapping[str, Any], task: int) -> str:
    """As the comparison names the task (``scoring/pairing.py``): its id, else its index."""
    name = next((row[f] for f in TASK_ID_FIELDS if row.get(f) is not None), None)
    return str(task) if name is None else str(name)
