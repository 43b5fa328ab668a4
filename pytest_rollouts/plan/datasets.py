"""Read a dataset file into its tasks: every line validated and routed before any request is sent.

Each task keeps only a byte offset into its file, not the row: the row is read again when
the run is materialized. The file's fingerprint (``sha256``, ``rows``) is taken on the way,
for the manifest that resume checks.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import field
from pathlib import Path

from pytest_rollouts.config.agents import Agents
from pytest_rollouts.config.routing import Routing, RoutingError, RowRefused
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.datatype import datatype
from pytest_rollouts.plan.declared import DeclarationError, Declarations
from pytest_rollouts.plan.numbering import DatasetTasks
from pytest_rollouts.rows.episodes import taskset_of
from pytest_rollouts.rows.prompts import PromptError, PromptTemplate
from pytest_rollouts.rows.schema import CREATE_PARAMS
from pytest_rollouts.store.artifacts import ArtifactPaths
from pytest_rollouts.store.jsonl import JsonlError, parse_object, scan_lines

_ABSENT = object()


class DatasetError(ValueError):
    """A row no run can send; the message names the file and line."""


class DatasetRefused(DatasetError):
    """A row the run's configuration refuses (``RowRefused``, a prompt template it cannot fill): a
    usage error, where a line that is no row is a collection error."""


@datatype(slots=True)
class TaskRow:
    """One row on one agent. A row fanned out to several agents is one task per agent (``fanned``),
    their rollout indices continuing one another from ``first_rollout``. One is made a row and read
    once: not frozen, which would cost a setter call a field."""

    row_index: int
    offset: int
    agent: str
    first_rollout: int
    repeats: int
    episode: bool
    fanned: bool
    # The values of the suite's ``keywords`` fields this row has (scalars only), for -k.
    keywords: tuple[str, ...] = ()


class DatasetScan:
    """The tasks of one dataset file, read once; ``shown`` is the file as messages name it."""

    def __init__(
        self, path: Path, shown: Path, settings: Settings, routing: Routing, prompt: PromptTemplate | None = None
    ) -> None:
        self._path = path
        self._shown = shown
        self._settings = settings
        self._routing = routing
        # The template materialization will fill each row with: a row it cannot fill is refused here.
        self._prompt = prompt
        self.sha256 = ""
        self.rows = 0
        # Lines of rows with no ``responses_create_params``, and none given for the run: NeMo Gym
        # agents refuse them (422), a custom agent may not need them, so they run, with one notice.
        self.unparametrized: list[int] = []

    def tasks(self) -> Iterator[TaskRow]:
        """Every row's tasks in file order, up to the run's ``limit``; ``DatasetError`` on a bad row."""
        settings, shown = self._settings, self._shown
        if self._prompt is not None and "input" in settings.responses_create_params:
            raise DatasetRefused(
                f"{shown}: its prompt template ({self._prompt.path}) builds each row's input, and the run's "
                f"{settings.source_of('responses_create_params')} gives one too: they exclude each other; drop one"
            )
        limit = settings.limit
        digest = hashlib.sha256()
        rows = 0
        # An agent's repeats (per kind of row), worked out once per file rather than once per row.
        repeats_of: dict[tuple[str, bool], int] = {}
        for row_index, (line_no, offset, line) in enumerate(scan_lines(self._path)):
            if limit is not None and row_index >= limit:
                break
            try:
                row = parse_object(line, shown, line_no)
                agents = self._routing.agents_for(row)
            except JsonlError as exc:
                raise DatasetError(str(exc)) from None
            except RowRefused as exc:
                raise DatasetRefused(f"{shown}:{line_no}: {exc}") from None
            except RoutingError as exc:
                raise DatasetError(f"{shown}:{line_no}: {exc}") from None
            digest.update(line.rstrip(b"\r\n") + b"\n")
            rows += 1
            first_rollout, episode = 0, taskset_of(row) is not None
            if self._prompt is not None and not episode:
                try:
                    row = self._prompt.apply(row)
                except PromptError as exc:
                    raise DatasetRefused(f"{shown}:{line_no}: {exc}") from None
            params = row.get(CREATE_PARAMS, _ABSENT)
            if params is _ABSENT and not episode:
                if not settings.responses_create_params:
                    self.unparametrized.append(line_no)
            elif not isinstance(params, dict) and not episode:
                given = "null" if params is None else type(params).__name__
                raise DatasetError(f"{shown}:{line_no}: {CREATE_PARAMS} must be a JSON object, not {given}")
            fanned = len(agents) > 1
            keywords = (
                tuple(str(row[name]) for name in self._routing.keywords if isinstance(row.get(name), str | int | float))
                if self._routing.keywords
                else ()
            )
            for agent in agents:
                repeats = repeats_of.get((agent, episode))
                if repeats is None:
                    names = self._routing.counted_as(agent, episode)
                    repeats = repeats_of[agent, episode] = settings.repeats_for(*names)
                yield TaskRow(row_index, offset, agent, first_rollout, repeats, episode, fanned, keywords)
                first_rollout += repeats
        self.sha256, self.rows = digest.hexdigest(), rows

    def notice(self) -> str:
        """What to tell about rows without request parameters, or ""."""
        lines = self.unparametrized
        if not lines:
            return ""
        shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
        return (
            f"{self._shown}: {len(lines)} rows have no {CREATE_PARAMS} (lines {shown}); "
            "NeMo Gym agents refuse such a row (HTTP 422)"
        )


@datatype(slots=True)
class Task:
    """A ``TaskRow`` as the Python API plans it (``plan.build.PlannedTask``); the pytest adapter's
    items carry the same attributes."""

    dataset: str
    path: Path
    offset: int
    row_index: int
    agent: str
    first_rollout: int
    repeats: int
    episode: bool
    task_index: int = -1
    slot: int = -1


@datatype
class ReadDatasets:
    """Every dataset of a run read: its tasks, each file's entry for the manifest, and notices."""

    tasks: list[Task]
    files: list[DatasetTasks]
    notices: list[str]
    # Each dataset's prompt template, by its path as its tasks hold it (``build_plan``'s ``prompt_for``).
    prompts: dict[Path, PromptTemplate] = field(default_factory=dict)


def read_datasets(paths: Sequence[Path], settings: Settings, agents: Agents, root: Path) -> ReadDatasets:
    """Read and route every row of ``paths`` (dataset files, or directories: the datasets their
    suites declare, as ``pytest DIR`` collects them), raising ``DatasetError`` or ``AgentsError``
    at the first bad one; files are named relative to ``root`` in the manifest and in messages."""
    read = ReadDatasets([], [], [])
    declarations = Declarations(settings, agents, root)
    for path in dataset_files(paths, root, settings.split, settings.paths if settings.out is not None else None):
        shown = Path(os.path.relpath(path, root))
        try:
            declared = declarations.of(path)
        except DeclarationError as exc:
            raise DatasetError(str(exc)) from None
        scan = DatasetScan(path, shown, settings, agents.routing_for(path.resolve()), declared.prompt)
        entry = DatasetTasks(shown.as_posix(), "", 0, declared=declared)
        for row in scan.tasks():
            task = Task(
                entry.name, path, row.offset, row.row_index, row.agent, row.first_rollout, row.repeats, row.episode
            )
            read.tasks.append(task)
            entry.agents.add(row.agent)
            entry.rollouts += row.repeats
        entry.sha256, entry.rows = scan.sha256, scan.rows
        read.files.append(entry)
        if declared.prompt is not None:
            read.prompts[path] = declared.prompt
        if notice := scan.notice():
            read.notices.append(notice)
    return read


def dataset_files(
    paths: Sequence[Path], root: Path, split: str | None = None, own: ArtifactPaths | None = None
) -> list[Path]:
    """The dataset files ``paths`` name: a file as given; a directory's ``.jsonl`` files that the
    nearest ``rollouts.toml`` declares in the run's ``split`` (``Suite.selects``), in name order,
    but the run's own (``own``). Each file once."""
    from pytest_rollouts.config import SuiteError, find_declaration
    from pytest_rollouts.config.suite import load_suite

    owns = own.owner() if own is not None else lambda path: False
    files: list[Path] = []
    for given in map(Path, paths):
        shown = os.path.relpath(given, root)
        if given.is_file():
            found = [given]
        elif given.is_dir():
            try:
                found = [
                    f
                    for f in sorted(given.rglob("*.jsonl"))
                    if (declaration := find_declaration(f.parent.resolve(), root.resolve())) is not None
                    and load_suite(declaration).selects(f.resolve(), split)
                    and not owns(f)
                ]
            except SuiteError as exc:
                raise DatasetError(str(exc)) from None
            if not found:
                raise DatasetError(f"{shown}: no dataset under it is declared in a rollouts.toml: name the files")
        else:
            raise DatasetError(f"{shown}: no such dataset file or suite directory")
        files += [f for f in found if f not in files]
    return files
