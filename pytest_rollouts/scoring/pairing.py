"""Two runs' tasks, read from their files and paired: the input of ``paired.compare``.

A task is named by its ``task_id`` (or ``_ng_task_id``, an episode's) when every materialized row
of the run has one and no two tasks of an agent share one, and otherwise by its ``_ng_task_index``.
A run takes a dataset whose ids repeat (NeMo Gym does), so such ids are no refusal: they just
name no task, and the run pairs by index like one without ids. An index names the same task in two
runs only when they read the same datasets in the same order, so pairing by index first checks the
run manifests' fingerprints (sha256 of each dataset file) and refuses runs over other data. Tasks
only one run has are refused too, unless ``allow_partial``: a comparison over part of the tasks
must say so, never pass for the whole set.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.fronting import fronted_by_of
from pytest_rollouts.rows.manifest import ManifestError, RunManifest, read_manifest
from pytest_rollouts.rows.records import is_masked, metrics_group, reward_of
from pytest_rollouts.rows.resume import key_of
from pytest_rollouts.rows.schema import TASK_ID
from pytest_rollouts.scoring.paired import TaskRewards
from pytest_rollouts.store.artifacts import ArtifactPaths, read_rows

# The row fields that name a task across runs, in the order they are looked for.
TASK_ID_FIELDS = ("task_id", TASK_ID)


class PairingError(ValueError):
    """The two runs cannot be compared task by task; the message says why and what to do."""


@datatype(frozen=True)
class RunTasks:
    """One run's scored rewards per group and task, keyed by the task's name across runs."""

    out: Path
    groups: dict[str, dict[str, TaskRewards]]
    by_id: bool  # tasks are named by a task id field, not by index
    fingerprint: tuple[str, ...] | None  # the datasets' sha256 in task order; None without a manifest
    # Why its task ids name no task (one id on two tasks of an agent), or "".
    repeated_id: str = ""


def read_run(out: Path) -> RunTasks:
    """A run's tasks from ``<stem>.jsonl`` and ``<stem>_materialized_inputs.jsonl`` (the denominator:
    a task's expected rollouts are its materialized ones, masked results left out)."""
    paths = ArtifactPaths(out)
    if not paths.materialized.exists():
        raise PairingError(f"{out}: no {paths.materialized.name} beside it; is it a run's <stem>.jsonl?")
    labels: dict[tuple[str, int], str] = {}
    expected: defaultdict[tuple[str, int], int] = defaultdict(int)
    group_of: dict[tuple[int, int], str] = {}
    by_id = True
    # Read once: the agent-to-server map and the datasets' fingerprint both come from it.
    recorded = _manifest(paths)
    front = fronted_by_of(paths, recorded)
    for row in read_rows(paths.materialized):
        key = key_of(row)
        group = metrics_group(row, front)
        group_of[key] = group
        expected[group, key[0]] += 1
        name = next((row[f] for f in TASK_ID_FIELDS if row.get(f) is not None), None)
        by_id = by_id and name is not None
        labels[group, key[0]] = str(name) if name is not None else str(key[0])
    rewards: defaultdict[tuple[str, int], list[float]] = defaultdict(list)
    for row in read_rows(paths.out):
        key = key_of(row)
        if key not in group_of:
            continue
        place = (group_of[key], key[0])
        if is_masked(row):
            expected[place] -= 1
        elif (reward := reward_of(row)) is not None and math.isfinite(reward):
            # An infinite reward has no difference to take: it counts as unknown, as a failure does.
            rewards[place].append(reward)
    repeated = _repeated_id(labels) if by_id else ""
    by_id = by_id and not repeated
    groups: defaultdict[str, dict[str, TaskRewards]] = defaultdict(dict)
    for (group, task), count in expected.items():
        label = labels[group, task] if by_id else str(task)
        groups[group][label] = TaskRewards(label, tuple(rewards[group, task]), count)
    fingerprint = (
        None if recorded is None else tuple(d.sha256 for d in sorted(recorded.datasets, key=lambda d: d.first_task))
    )
    return RunTasks(out, dict(groups), by_id, fingerprint, f"{out}: {repeated}" if repeated else "")


def _repeated_id(labels: Mapping[tuple[str, int], str]) -> str:
    """The first task id two tasks of an agent share, said with the tasks (``task id 'a' names tasks
    0 and 3 of agent 'policy'``); "" when each names one task."""
    seen: dict[tuple[str, str], int] = {}
    for (group, task), label in sorted(labels.items(), key=lambda item: item[0][1]):
        first = seen.setdefault((group, label), task)
        if first != task:
            return f"task id {label!r} names tasks {first} and {task} of agent {group!r}"
    return ""


def _fingerprint(recorded: RunManifest | None) -> tuple[str, ...] | None:
    """The datasets' sha256 in task order; None without a manifest."""
    if recorded is None:
        return None
    return tuple(d.sha256 for d in sorted(recorded.datasets, key=lambda d: d.first_task))


def _manifest(paths: ArtifactPaths) -> RunManifest | None:
    """The run's manifest (None without one); a damaged one cannot say which datasets the run read."""
    try:
        return read_manifest(paths.manifest)
    except ManifestError as exc:
        raise PairingError(str(exc)) from None


@datatype(frozen=True)
class Pairing:
    """Each group's (baseline, candidate) tasks, and how many tasks had no partner."""

    groups: dict[str, list[tuple[TaskRewards, TaskRewards]]]
    left_out: int
    how: str  # "task id" or "task index"

    @property
    def note(self) -> str:
        """What a partial comparison says of itself; "" when every task was paired."""
        if not self.left_out:
            return ""
        return f"{self.left_out} tasks without a partner in the other run left out of the comparison"


def pair_runs(
    baseline: RunTasks, candidate: RunTasks, allow_partial: bool = False, agents: Mapping[str, str] | None = None
) -> Pairing:
    """Pair the two runs' tasks by group and name; ``PairingError`` when they cannot be.

    ``agents`` pairs a baseline agent with a candidate agent of another name (``{"gpt": "llama"}``):
    two models behind two agents are the usual comparison. Two runs of one agent each are paired
    whatever their names, as there is no other way to read them; each comparison is named after
    the candidate's agent."""
    renamed = _renamed(baseline, candidate, agents or {})
    by_id = baseline.by_id and candidate.by_id
    # Why task ids cannot pair the runs (one names two tasks), if so: they pair by index, and say why.
    repeated = baseline.repeated_id or candidate.repeated_id
    if not by_id:
        _check_same_inputs(baseline, candidate, repeated)
    groups: dict[str, list[tuple[TaskRewards, TaskRewards]]] = {}
    left_out = 0
    base_groups = {renamed.get(name, name): tasks for name, tasks in baseline.groups.items()}
    for group in sorted(base_groups.keys() | candidate.groups.keys()):
        base, cand = base_groups.get(group, {}), candidate.groups.get(group, {})
        shared = sorted(base.keys() & cand.keys(), key=_natural)
        left_out += len(base) + len(cand) - 2 * len(shared)
        if shared:
            groups[group] = [(base[name], cand[name]) for name in shared]
    if left_out and not allow_partial:
        raise PairingError(
            f"{left_out} tasks have no partner in the other run (by {'task id' if by_id else 'task index'}, "
            "per agent); --allow-partial compares only the tasks both runs have"
        )
    if not groups:
        raise PairingError("the runs have no task in common (by agent and task); nothing to compare")
    how = "task id" if by_id else "task index"
    if repeated:
        how += f" (task ids repeat: {repeated})"
    if renamed:
        how += "; " + ", ".join(f"agent {b} (baseline) with {c} (candidate)" for b, c in sorted(renamed.items()))
    return Pairing(groups, left_out, how)


def _renamed(baseline: RunTasks, candidate: RunTasks, agents: Mapping[str, str]) -> dict[str, str]:
    """Baseline agent -> candidate agent, for the agents that pair under other names."""
    for base, cand in agents.items():
        if base not in baseline.groups:
            raise PairingError(f"no agent {base!r} in the baseline run (it has {', '.join(sorted(baseline.groups))})")
        if cand not in candidate.groups:
            raise PairingError(f"no agent {cand!r} in the candidate run (it has {', '.join(sorted(candidate.groups))})")
    if not agents and len(baseline.groups) == len(candidate.groups) == 1:
        agents = {next(iter(baseline.groups)): next(iter(candidate.groups))}
    return {base: cand for base, cand in agents.items() if base != cand}


def _check_same_inputs(baseline: RunTasks, candidate: RunTasks, repeated: str) -> None:
    """Task indices pair only runs over the same datasets: the manifests' fingerprints must agree.
    ``repeated``: why task ids could not pair them, if that is why indices must."""
    ids = f"task ids cannot pair them ({repeated}), and " if repeated else ""
    advice = "give each task a task_id of its own" if repeated else "give the dataset rows a task_id field"
    missing = [str(run.out) for run in (baseline, candidate) if run.fingerprint is None]
    if missing:
        raise PairingError(
            f"{ids}no run manifest for {', '.join(missing)}: task indices cannot be shown to name the same tasks "
            f"in both runs; {advice} to pair by"
        )
    if baseline.fingerprint != candidate.fingerprint:
        raise PairingError(
            f"{ids}the runs read different datasets (their manifests' sha256 differ), so task indices name "
            f"different tasks; {advice} to pair by"
        )


def _natural(label: str) -> tuple[int, int | str]:
    """Task indices (and ids of ASCII digits alone) in number order, other ids in text order.

    ``str.isdigit`` alone is no test for ``int``: it holds for "²" and "①", which ``int`` refuses."""
    return (0, int(label)) if label.isascii() and label.isdigit() else (1, label)
