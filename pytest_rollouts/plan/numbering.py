"""Run-wide task numbers, the run manifest, and whether this run resumes an earlier one.

A fresh run numbers datasets in the order given; a resumed run takes each file's first task
index from the recorded manifest, so files it skips shift nothing, and a changed input is
refused before anything is moved or sent.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from pytest_rollouts.config.agents import Agents
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.datatype import datatype
from pytest_rollouts.plan.build import PlanError
from pytest_rollouts.plan.declared import Declared
from pytest_rollouts.rows.manifest import DatasetEntry, ManifestError, RunManifest, differences, read_manifest
from pytest_rollouts.store.artifacts import ArtifactPaths


@datatype
class DatasetTasks:
    """What a run takes from one dataset file: its fingerprint, and the agents and rollouts of its rows."""

    # As the manifest records it: relative to the run's root, in POSIX form.
    name: str
    sha256: str
    rows: int
    agents: set[str] = field(default_factory=set)
    rollouts: int = 0
    # What its suite or head server declares (``plan.declared``): its split, and the template.
    declared: Declared | None = None


@datatype
class Numbering:
    """The manifest of this run, each dataset's first task index, whether it resumes an earlier
    run, and what the user must be told."""

    manifest: RunManifest
    first_task: dict[str, int]
    resuming: bool
    notices: list[str] = field(default_factory=list)
    # Routing keys (agent map, fan-out) no row matched, said as a notice, or "": a typo, likely.
    unmatched: str = ""
    # The manifest a resume read from disk (None for a fresh run, or a resume without one): read
    # once, here, and handed on to the plan, which checks the materialized inputs against it.
    recorded: RunManifest | None = None


def number_run(
    datasets: Sequence[DatasetTasks],
    settings: Settings,
    agents: Agents,
    *,
    asked_resume: bool,
    shown: Callable[[Path], str],
) -> Numbering:
    """Number a run's tasks once its datasets are read, before any file is moved or request sent.

    Refuses (``AgentsError``, ``PlanError``) options that name unknown agents, a resume without
    its materialized inputs, and a resume whose input changed.
    """
    agents.check_named()
    unused = agents.unused_keys_notice()
    assert settings.out is not None
    paths = settings.paths
    resuming = wants_resume(asked_resume, paths, shown)
    numbering = number_datasets(datasets, settings, paths, resuming=resuming, routed=agents.registry.used_keys)
    numbering.unmatched = unused
    return numbering


def wants_resume(asked: bool, paths: ArtifactPaths, shown: Callable[[Path], str]) -> bool:
    """Whether this run resumes: asked, and a materialized set is on disk.

    Nothing recorded yet is a fresh run, so a job script can always ask to resume. Results
    without their materialized inputs are refused: a fresh run would move every result aside,
    and without the run's denominator there is nothing to resume against.
    """
    if not asked or paths.materialized.exists():
        if not asked:
            _refuse_foreign(paths, shown)
        return asked
    held = [shown(p) for p in (paths.out, paths.failures) if p.exists() and p.stat().st_size]
    if held:
        raise PlanError(
            f"cannot resume: the materialized inputs {shown(paths.materialized)} are missing, though "
            f"{' and '.join(held)} hold rows of the run they belong to; they are what a resume runs against: "
            "restore them, or run without --rollouts-resume to start afresh (the earlier results are moved aside)"
        )
    _refuse_foreign(paths, shown)
    return False


def _refuse_foreign(paths: ArtifactPaths, shown: Callable[[Path], str]) -> None:
    """A fresh run may not take a ``--rollouts-materialized`` place holding a file its output's runs
    did not write there (another run's inputs, a dataset): starting, it would move that file aside
    into this run's earlier results, where its own run would never find it again."""
    place = paths.materialized_at
    if place is None or not place.exists() or place.resolve() == ArtifactPaths(paths.out).materialized.resolve():
        return
    raise PlanError(
        f"{shown(place)} already holds a file that no earlier run of {shown(paths.out)} wrote (another run's "
        "materialized inputs, or a dataset?): name another place for the materialized inputs, or move that file"
    )


def number_datasets(
    datasets: Sequence[DatasetTasks],
    settings: Settings,
    paths: ArtifactPaths,
    *,
    resuming: bool,
    routed: Collection[str] = (),
) -> Numbering:
    """Each dataset's first task index and the run manifest; a resume whose input changed is refused.
    ``routed``: the agent-map and fan-out keys some row matched (the others changed nothing)."""
    try:
        recorded = read_manifest(paths.manifest) if resuming else None
    except ManifestError as exc:
        raise PlanError(f"cannot resume: {exc}") from None
    next_task = recorded.next_task() if recorded else 0
    entries = []
    for dataset in datasets:
        known = recorded.entry(dataset.name) if recorded else None
        first = known.first_task if known else next_task
        next_task = max(next_task, first + dataset.rows)
        declared = dataset.declared
        prompt = declared.prompt if declared else None
        entries.append(
            DatasetEntry(
                path=dataset.name,
                sha256=dataset.sha256,
                rows=dataset.rows,
                first_task=first,
                agents=sorted(dataset.agents),
                rollouts=dataset.rollouts,
                split=declared.split if declared else None,
                prompt_config=None if prompt is None else prompt.path.as_posix(),
                prompt_sha256=None if prompt is None else prompt.sha256,
            )
        )
    firsts = {e.path: e.first_task for e in entries}
    manifest = RunManifest(
        datasets=entries,
        shape=shape(settings, routed),
        split=run_split(datasets, settings),
        materialized=_materialized_entry(paths),
    )
    numbering = Numbering(manifest, firsts, resuming, recorded=recorded)
    if recorded is not None:
        changed = differences(recorded, numbering.manifest)
        if changed and not settings.resume_recorded:
            raise PlanError(_refuse_changed(paths, changed, settings))
    elif resuming:
        numbering.notices.append(
            f"no run manifest next to {paths.out}; resuming from {paths.materialized} without checking the input"
        )
    return numbering


def run_split(datasets: Sequence[DatasetTasks], settings: Settings) -> str | None:
    """The run's split: the one asked for, else the one every dataset is declared in (None when
    they declare none, or several). A dataset declared in another split than the one asked for
    (named on its own: a directory collects only the asked one's) is refused, naming where."""
    asked = settings.split
    declared = [d.declared for d in datasets if d.declared is not None and d.declared.split is not None]
    if asked is not None:
        for dataset in datasets:
            if dataset.declared is not None and dataset.declared.split not in (None, asked):
                raise PlanError(
                    f"{dataset.name} is declared in the {dataset.declared.split} split ({dataset.declared.where}), "
                    f"but the run asks for {asked} ({settings.source_of('split')}): run its split, or drop the file"
                )
        return asked
    splits = {d.split for d in declared}
    return splits.pop() if len(splits) == 1 and len(declared) == len(datasets) else None


def _materialized_entry(paths: ArtifactPaths) -> str | None:
    """The materialized inputs' place as the manifest records it: relative to the manifest, and
    only when they are not beside the output."""
    if paths.materialized_at is None or paths.materialized_at.resolve() == paths.beside_materialized.resolve():
        return None
    return os.path.relpath(paths.materialized_at.resolve(), paths.manifest.parent.resolve())


def shape(settings: Settings, routed: Collection[str] = ()) -> dict[str, Any]:
    """The options that shape the materialized set: a resume with other values is another run.

    Of the agent map and fan-out, only the keys some row matched (``routed``): one that matched
    none (a typo, said as such) shaped nothing, and dropping it must not block the resume."""
    s = settings
    agent_map = {key: agent for key, agent in s.agent_map.items() if key in routed}
    fan_out = {key: list(agents) for key, agents in s.fan_out.items() if key in routed}
    return {
        "repeats": s.repeats,
        "limit": s.limit,
        "interleave_repeats": s.interleave_repeats,
        "repeats_add_seed": s.repeats_add_seed,
        "responses_create_params": s.responses_create_params,
        "shard": None if s.shard is None else f"{s.shard[0]}/{s.shard[1]}",
        # Only when used, so runs recorded before routing options existed still resume.
        **({"agent_map": agent_map} if agent_map else {}),
        **({"fan_out": fan_out} if fan_out else {}),
        # Legacy routing sends flat rows elsewhere and stamps them: another materialized set.
        **({"environment_server": s.environment_server} if s.environment_routing_mode == "legacy" else {}),
    }


def _refuse_changed(paths: ArtifactPaths, changed: list[str], settings: Settings) -> str:
    lines = [f"cannot resume {paths.out}: the input changed since the recorded run:"]
    lines += [f"  - {c}" for c in changed]
    lines.append(
        f"Run without {settings.source_of('resume')} to start over (the old artifacts are moved aside), "
        f"or pass {settings.source_of('resume_recorded')} to go on with the recorded materialized set."
    )
    return "\n".join(lines)
