"""The plan of a run: every rollout it dispatches, read from its materialized inputs.

A fresh run writes the materialized inputs (one stamped row per rollout) and plans all of
them; a resumed run reads the recorded ones back against the rows already on disk and plans
only what they still lack. Both take tasks as the pytest items or the Python API hold them
(``PlannedTask``), so both front doors plan alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_rollouts.config.settings import Settings
from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.episodes import taskset_of
from pytest_rollouts.rows.key_index import KeyIndex
from pytest_rollouts.rows.manifest import RunManifest, write_manifest
from pytest_rollouts.rows.materialize import materialize_row, rollout_order
from pytest_rollouts.rows.planned import Key, Plan, PlannedRollout, PlannedRollouts
from pytest_rollouts.rows.records import RolloutOutcome, metrics_group
from pytest_rollouts.rows.resume import KeyHistory, Verdict, decide, histories, key_of
from pytest_rollouts.rows.schema import ENVIRONMENT_SERVER
from pytest_rollouts.store.artifacts import (
    ArtifactPaths,
    ArtifactRow,
    RowsDigest,
    artifact_rows,
    read_rows,
    rows_digest,
    torn_tail,
)
from pytest_rollouts.store.jsonl import JsonlError, LineReader, dumps, parse_object, replaced_atomically

if TYPE_CHECKING:
    from pytest_rollouts.config.agents import Agents
    from pytest_rollouts.rows.prompts import PromptTemplate


class PlanError(ValueError):
    """The run cannot be planned (its recorded files are damaged or missing); nothing was sent."""


class PlannedTask(Protocol):
    """One dataset row on one agent, as planning needs it: where the row is, which task it is, and
    where it sits in the dispatch plan (``slot``)."""

    path: Path
    offset: int
    agent: str
    first_rollout: int
    repeats: int
    episode: bool
    task_index: int
    slot: int


# A dataset file's prompt template (``plan.declared``), or None: its rows are sent as they are.
PromptFor = Callable[[Path], "PromptTemplate | None"]


@datatype(frozen=True)
class RowShaping:
    """What makes a dataset row its request besides the run's options: its file's prompt template,
    and the environment servers flat rows go through (``Agents.environment_servers``). A flat row
    routed to one names the agent the server runs rows on (its ``agent_server``, when known) as
    ``agent_ref``, as NeMo Gym's ``_stamp_environment_server_agent_refs`` does: results and metrics
    keep the agent they ran on. Legacy routing (``stamp``) also stamps it ``_ng_environment_server``;
    agent routing does not, as NeMo Gym does not: its resume looks a stamp up in its own config."""

    prompt_for: PromptFor | None = None
    servers: Mapping[str, str | None] = field(default_factory=dict)
    stamp: bool = False

    @classmethod
    def of(cls, agents: Agents, prompt_for: PromptFor | None) -> RowShaping:
        return cls(prompt_for, agents.environment_servers(), agents.settings.environment_routing_mode == "legacy")

    def via_server(self, task: PlannedTask) -> bool:
        """Whether ``task``'s rows are flat rows sent through an environment server."""
        return not task.episode and task.agent in self.servers


# Rows as they are: no template, no environment server.
UNSHAPED = RowShaping()


def fronted_by(tasks: Sequence[PlannedTask], shaping: RowShaping) -> dict[str, str]:
    """Each agent whose rows this run sends, unstamped, through the environment server in front of
    it, to that server (agent routing): the group an unstamped row of it is scored under
    (``records.metrics_group``), and recorded in the manifest for readers without the config."""
    if shaping.stamp:
        return {}
    found: dict[str, str] = {}
    for task in tasks:
        agent = shaping.servers.get(task.agent) if shaping.via_server(task) else None
        if agent is not None:
            found[agent] = task.agent
    return found


def build_plan(
    tasks: Sequence[PlannedTask],
    paths: ArtifactPaths,
    settings: Settings,
    manifest: RunManifest,
    *,
    resuming: bool,
    shown: str,
    shaping: RowShaping = UNSHAPED,
    records: bool = True,
    recorded: RunManifest | None = None,
) -> Plan:
    """The plan of a run whose files are prepared (``ArtifactPaths.start_run``): a resumed run's from
    its recorded files (``PlanError`` when they are damaged), a fresh run's by writing its manifest
    and materialized inputs (``ArtifactError`` when they cannot be written). ``records``: this
    process prepared the files and writes the manifest; a later process of the run (an xdist worker
    after the first) materializes the same rows for its offsets and leaves the manifest alone.
    ``recorded``: the manifest a resume read from disk when it numbered the tasks (``Numbering``)."""
    if resuming:
        plan = plan_resume(tasks, paths, settings, shown, shaping, recorded)
        if records:
            _record_new_place(paths, manifest, recorded)
        return plan
    # Written before the inputs (a crash between leaves a manifest naming their place, so the next run
    # finds and moves them), and again with their digest once they are whole.
    if records:
        write_manifest(paths.manifest, manifest)
    digest = RowsDigest()
    plan = materialize(tasks, paths.materialized, settings, shaping, digest)
    if records:
        done = {"materialized_digest": digest.hex(), "fronted_by": fronted_by(tasks, shaping)}
        write_manifest(paths.manifest, manifest.model_copy(update=done))
    return plan


def _record_new_place(paths: ArtifactPaths, manifest: RunManifest, recorded: RunManifest | None) -> None:
    """A resume told where the materialized inputs are now (``--rollouts-materialized``, the file
    moved) records that place, so later resumes, ``aggregate`` and ``compare`` find it there."""
    if paths.materialized_at is not None and recorded is not None and recorded.materialized != manifest.materialized:
        write_manifest(paths.manifest, recorded.model_copy(update={"materialized": manifest.materialized}))


def materialize(
    tasks: Sequence[PlannedTask],
    path: Path,
    settings: Settings,
    shaping: RowShaping = UNSHAPED,
    digest: RowsDigest | None = None,
) -> Plan:
    """Write every planned rollout's request body, remembering where each one sits; a dataset with
    a prompt template has its rows' input built by it first (the scan checked every row fills).

    Written to a private file and renamed into place, so concurrent xdist workers
    (which all materialize the same rows) never interleave their writes. What a task's rollouts
    share (its row, its routing, its group's index) is worked out once a task: only the rollout
    index, the line and where it sits change per rollout. ``digest`` takes each line as it is written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)  # --rollouts-materialized may name a new folder
    rollouts = PlannedRollouts()
    expected: dict[str, KeyIndex] = {}
    create_params, add_seed = settings.responses_create_params, settings.repeats_add_seed
    last_position, last_path, prompt = -1, None, None
    offset = 0
    with LineReader() as reader, replaced_atomically(path) as out:
        counts = [(task.first_rollout, task.repeats) for task in tasks]
        for position, rollout_index in rollout_order(counts, settings.interleave_repeats):
            if position != last_position:
                task = tasks[position]
                last_position = position
                if not task.episode and task.path is not last_path:  # a file's tasks come together
                    last_path = task.path
                    prompt = shaping.prompt_for(task.path) if shaping.prompt_for is not None else None
                row = _task_row(task, reader, prompt)
                via_server = shaping.via_server(task)
                server_agent = shaping.servers.get(task.agent)
                index = expected.get(task.agent)
                if index is None:
                    index = expected[task.agent] = KeyIndex()
            materialized = materialize_row(
                row,
                task_index=task.task_index,
                rollout_index=rollout_index,
                agent=task.agent,
                create_params=create_params,
                add_seed=add_seed,
                episode=task.episode,
                via_server=via_server,
                server_agent=server_agent,
                stamp_server=shaping.stamp,
            )
            line = dumps(materialized)
            out.write(line + b"\n")
            if digest is not None:
                digest.add(line)
            index[task.task_index, rollout_index] = offset
            rollouts.add(
                task.slot, task.task_index, rollout_index, task.agent, offset, len(line), 0, task.episode, via_server
            )
            offset += len(line) + 1
    return Plan(rollouts, len(tasks), expected=expected)


def _task_row(task: PlannedTask, reader: LineReader, prompt: PromptTemplate | None) -> dict[str, Any]:
    """``task``'s dataset row, read again from its file, its input built by the file's prompt
    template (``prompt_for``, which each door answers from what it read once a file) unless it is
    an episode."""
    row = parse_object(reader.read(task.path, task.offset), task.path, 0)
    return row if prompt is None or task.episode else prompt.apply(row)


def _check_fingerprint(paths: ArtifactPaths, shown: str, option: str, recorded: RunManifest | None) -> None:
    """``PlanError`` when the materialized inputs are not the file the run recorded (``recorded``,
    its manifest): another run given the same ``--rollouts-materialized`` wrote its own there, or it
    was edited. Resumed against them, this run's results would be scored against another run's rows."""
    if recorded is None or recorded.materialized_digest is None:
        return
    if rows_digest(paths.materialized) != recorded.materialized_digest:
        raise PlanError(
            f"cannot resume: {shown} is not the materialized inputs this run wrote (its rows' digest is not the one "
            f"{paths.manifest.name} records): another run wrote its own there (one {option} for "
            "two runs?), or it was edited. Restore this run's, or run without --rollouts-resume to start afresh"
        )


def plan_resume(
    tasks: Sequence[PlannedTask],
    paths: ArtifactPaths,
    settings: Settings,
    shown: str,
    shaping: RowShaping = UNSHAPED,
    recorded: RunManifest | None = None,
) -> Plan:
    """Re-run what the recorded materialized set still lacks; settle the rest from disk.

    ``shown``: the materialized inputs as the user should read their path. A recorded row finds its
    item by its task and the name it is sent to (``records.metrics_group``): a row NeMo Gym's collector
    materialized under agent routing names its agent and no server, as this run's rows do now; a row
    of an earlier run of ours may carry the server's stamp. Either finds the item sent through it.
    """
    try:
        past = histories(read_rows(paths.out), read_rows(paths.failures))
    except JsonlError as exc:
        raise PlanError(f"cannot resume: {exc}") from None
    slots = {(task.task_index, task.agent): task for task in tasks}
    front = fronted_by(tasks, shaping)
    # The recorded set goes on as recorded where the routing now differs too (another agent, a server
    # in front): a task's recorded rollouts run on its one item, sent to the agent recorded.
    items = Counter(task.task_index for task in tasks) if settings.resume_recorded else Counter()
    only = {task.task_index: task for task in tasks if items[task.task_index] == 1}
    plan = Plan(PlannedRollouts(), len(tasks))
    for entry, key, agent in _recorded(paths, shown, settings, front, recorded):
        plan.expected.setdefault(agent, KeyIndex())[key] = entry.offset
        task = slots.get((key[0], agent))
        if task is None and settings.resume_recorded:
            task = only.get(key[0])
        if task is None:
            continue
        history = past.by_key.get(key)
        verdict = decide(
            history, max_attempts=settings.max_attempts, retry_terminal_timeouts=settings.retry_terminal_timeouts
        )
        if verdict is Verdict.RUN:
            plan.rollouts.append(_again(task.slot, entry, key, agent, history, shaping))
        else:
            assert history is not None
            plan.prior.setdefault(task.slot, []).append(_settled(key[1], verdict, history, settings.max_attempts))
    if settings.longest_first:
        longest = past.task_longest()
        plan.rollouts.sort_by_task(lambda task_index: -longest.get(task_index, 0.0))
    return plan


def _recorded(
    paths: ArtifactPaths, shown: str, settings: Settings, front: Mapping[str, str], manifest: RunManifest | None
) -> list[tuple[ArtifactRow, Key, str]]:
    """The recorded materialized rows, each with its key and the name it is grouped under; a damaged
    or foreign list is refused."""
    cut = torn_tail(paths.materialized)
    if cut:
        # Written whole and renamed into place, so no crash cuts it: a key lost here would
        # silently leave the run's denominator.
        raise PlanError(
            f"cannot resume: {shown} ends in a line cut short ({cut} bytes); "
            "it is written whole, so the file was damaged: restore it, or start a fresh run"
        )
    _check_fingerprint(paths, shown, settings.source_of("materialized"), manifest)
    try:
        return [
            (entry, key_of(entry.row), metrics_group(entry.row, front)) for entry in artifact_rows(paths.materialized)
        ]
    except JsonlError as exc:
        raise PlanError(f"cannot resume: {exc}") from None


def _again(
    slot: int, entry: ArtifactRow, key: Key, agent: str, history: KeyHistory | None, shaping: RowShaping
) -> PlannedRollout:
    """A recorded rollout to send again, its attempts numbered on from its failures."""
    episode = taskset_of(entry.row) is not None
    return PlannedRollout(
        slot,
        key[0],
        key[1],
        agent,
        entry.offset,
        entry.size,
        first_attempt=history.failures if history else 0,
        episode=episode,
        via_server=not episode and (ENVIRONMENT_SERVER in entry.row or agent in shaping.servers),
    )


def _settled(rollout_index: int, verdict: Verdict, history: KeyHistory, max_attempts: int) -> RolloutOutcome:
    if verdict is Verdict.DONE:
        return RolloutOutcome(
            rollout_index, history.reward, None, "", history.longest, 0, cached=True, masked=history.masked
        )
    why = (
        "terminal failure recorded earlier"
        if verdict is Verdict.TERMINAL
        else f"gave up after {history.failures} attempts (max {max_attempts})"
    )
    return RolloutOutcome(
        rollout_index,
        None,
        history.latest_class,
        ": ".join(filter(None, (why, history.latest_message))),
        history.longest,
        0,
        cached=True,
        given_up=verdict is Verdict.CAPPED,
    )
