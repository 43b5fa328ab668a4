"""Dataset files become pytest items: one item per row (and agent), the row's repeats are its rollouts.

This module is imported for every ``.jsonl`` file pytest walks past, so deciding
*whether* a file is a dataset costs a few ``stat`` calls and no heavy import. An
item keeps only a byte offset into its file; the row is read again when the run is
materialized.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rollouts.config import SuiteError, find_declaration
from pytest_rollouts.config.output_values import dataset_clash
from pytest_rollouts.config.values import not_utf8, readable
from pytest_rollouts.pacing import lasting
from pytest_rollouts.pytest.progress import tell
from pytest_rollouts.pytest.properties import json_property, record_outcomes
from pytest_rollouts.pytest.role import role
from pytest_rollouts.pytest.stash import RUN_KEY
from pytest_rollouts.rows.records import NO_REWARD, dominant_class
from pytest_rollouts.rows.schema import CANCELLED

if TYPE_CHECKING:
    from pytest_rollouts.config.routing import Routing
    from pytest_rollouts.config.settings import Settings
    from pytest_rollouts.plan.declared import Declared
    from pytest_rollouts.rows.records import RolloutOutcome


def collect_dataset(file_path: Path, parent: pytest.Collector, run_of: Callable[[], Any]) -> DatasetFile | None:
    """A ``DatasetFile`` for a ``.jsonl`` named on the command line, a dataset a suite declares in
    the run's split, or one the head server's config lists in it. ``run_of``: the session's run."""
    if parent.session.isinitpath(file_path) or _named(parent.config, file_path):
        return DatasetFile.from_parent(parent, path=file_path)
    declaration = find_declaration(file_path.parent, parent.config.rootpath)
    if declaration is not None and _owned(parent.config, run_of)(file_path):
        return None  # the run's own output, inside a suite whose patterns match it
    if declaration is not None:
        from pytest_rollouts.config.suite import load_suite

        try:
            suite = load_suite(declaration)
            # Which split runs needs the settings: only a suite that declares splits reads them.
            declared = suite.declares(file_path) and (
                not suite.config.splits or suite.selects(file_path, run_of().settings.split)
            )
        except SuiteError:
            declared = True  # let collection report the broken declaration
        if declared:
            return DatasetFile.from_parent(parent, path=file_path)
    run = parent.config.stash.get(RUN_KEY, None)
    if run is not None and run.settings.head_server is not None and _head_selects(run, file_path):
        return DatasetFile.from_parent(parent, path=file_path)
    return None


OWNER_KEY = pytest.StashKey[Callable[[Path], bool]]()


def _owned(config: pytest.Config, run_of: Callable[[], Any]) -> Callable[[Path], bool]:
    """The run's own files, looked up once per collection rather than for every file met."""
    if OWNER_KEY not in config.stash:
        config.stash[OWNER_KEY] = run_of().settings.paths.owner()
    return config.stash[OWNER_KEY]


def _named(config: pytest.Config, file_path: Path) -> bool:
    """Whether the command line names ``file_path`` itself. pytest drops an argument inside another
    one (``pytest suite/train/a.jsonl suite``) from its initial paths, but a file named runs
    whatever split its suite collects."""
    return file_path.resolve() in _arguments(config)


def _arguments(config: pytest.Config) -> list[Path]:
    here = config.invocation_params.dir
    return [(here / arg.split("::", 1)[0]).resolve() for arg in config.args]


def refuse_missing_head_datasets(config: pytest.Config, run: Any) -> None:
    """A usage error when the head server's config lists datasets of the run's split, under the
    directories collected, that are not on disk: a suite refuses a pattern that matches no file."""
    from pytest_rollouts.config.agents import AgentsError

    if run.settings.head_server is None:
        return
    try:
        missing = run.declarations.head_missing([p for p in _arguments(config) if p.is_dir()])
    except AgentsError as exc:
        raise pytest.UsageError(str(exc)) from None
    if missing:
        raise pytest.UsageError(
            f"the head server's config lists datasets that are not on disk: {', '.join(missing)} (paths are "
            f"read from {config.rootpath}): restore them, run from NeMo Gym's directory, or name the files to run"
        )


def _head_selects(run: Any, file_path: Path) -> bool:
    """A file the head server's config lists in the run's split (a usage error if it is unreadable)."""
    from pytest_rollouts.config.agents import AgentsError
    from pytest_rollouts.plan.declared import DeclarationError

    try:
        return bool(run.declarations.head_selects(file_path))
    except DeclarationError:
        return True  # collected, so collection reports the conflicting entries, naming the file
    except AgentsError as exc:
        raise pytest.UsageError(str(exc)) from None


class DatasetFile(pytest.File):
    """A JSONL dataset. Every line is validated here, before any request can be sent.

    Collecting also fingerprints the rows used (``sha256``, ``rows``), for resume.
    """

    sha256 = ""
    rows = 0
    # Its split and prompt template (``plan.declared``), for the scan and the manifest.
    declared: Declared | None = None

    @cached_property
    def relpath(self) -> str:
        """The file relative to the rootdir, as pytest shows item locations."""
        return os.path.relpath(self.path, self.config.rootpath)

    def collect(self) -> Iterator[RolloutItem]:
        from pytest_rollouts.config.routing import RoutingError

        run = self.config.stash[RUN_KEY]  # the plugin made it for this file
        dist = role(self.config).dist
        if dist != "no":
            from pytest_rollouts.pytest.xdist import refusal

            reason = refusal(dist)
            if reason:
                raise self.CollectError(reason)
        run.warm_engine()
        shown = Path(os.path.relpath(self.path, self.config.invocation_params.dir))
        bad = not_utf8(str(shown))
        clash = dataset_clash(shown, run.settings.paths, run.settings.html)
        if bad or clash:  # a usage error (exit 4), before any file is touched
            run.numbering.refuse(
                clash or f"{readable(str(shown))}: its name holds bytes that are not UTF-8 ({bad}); rename it"
            )
            return
        from pytest_rollouts.plan.declared import DeclarationError

        try:
            routing = run.routing_for(self.path)
            self.declared = run.declarations.of(self.path)
        except SuiteError as exc:
            said_once(self, exc)
            return
        except (RoutingError, DeclarationError) as exc:
            raise self.CollectError(str(exc)) from None
        with lasting():
            yield from self._items(run.settings, routing, shown)

    def _items(self, settings: Settings, routing: Routing, shown: Path) -> Iterator[RolloutItem]:
        from pytest_rollouts.plan.datasets import DatasetError, DatasetRefused, DatasetScan

        assert self.declared is not None
        scan = DatasetScan(self.path, shown, settings, routing, self.declared.prompt)
        # An explicit structured node id ("[...]" are its parameters: --lf finds items by it), made
        # from the file's: its path and names are this file's objects, shared by every item.
        task_id = self.id.child("task")
        # -k's names of an item (its agent, its row's keyword values), one set for all items that share them.
        matches: dict[tuple[str, tuple[str, ...]], set[str]] = {}
        try:
            for task in scan.tasks():
                key = (task.agent, task.keywords)
                keyword_matches = matches.get(key)
                if keyword_matches is None:
                    keyword_matches = matches[key] = {task.agent, *task.keywords}
                # A task that runs on several agents shows which one in its id, joined the way
                # pytest joins parameter ids, so -k can select it.
                params = f"{task.row_index}-{task.agent}" if task.fanned else str(task.row_index)
                yield RolloutItem.from_parent(
                    self,
                    name=f"task[{params}]",
                    nodeid=task_id.with_params(params),
                    offset=task.offset,
                    row_index=task.row_index,
                    agent=task.agent,
                    first_rollout=task.first_rollout,
                    repeats=task.repeats,
                    episode=task.episode,
                    keyword_matches=keyword_matches,
                )
        except DatasetRefused as exc:  # the run's refusal, once collection is done: a usage error (exit 4)
            self.config.stash[RUN_KEY].numbering.refuse(str(exc))
            return
        except DatasetError as exc:
            raise self.CollectError(str(exc)) from None
        self.sha256, self.rows = scan.sha256, scan.rows
        notice = scan.notice()
        if notice:  # a worker has no terminal: its warnings reach the controller's
            tell(self.config, notice) or self.warn(pytest.PytestWarning(notice))


class SuiteDeclarationFile(pytest.File):
    """A ``rollouts.toml``, collected for its errors only: its datasets are collected as files of
    their own, but a pattern that matches none of them has no file to be reported on."""

    def collect(self) -> Iterator[pytest.Item]:
        from pytest_rollouts.config.suite import load_suite

        try:
            unmatched = load_suite(self.path).unmatched()
        except SuiteError as exc:
            said_once(self, exc)
            return
        if unmatched:
            names = ", ".join(repr(p) for p in unmatched)
            raise self.CollectError(f"{self.path}: datasets {names} match no file under {self.path.parent}")
        yield from ()


SUITE_ERRORS_KEY = pytest.StashKey[set[str]]()


def said_once(collector: pytest.Collector, error: Exception) -> None:
    """A broken declaration is one collection error, on whichever of its files pytest meets first:
    the declaration and each of its datasets each repeated it."""
    said = collector.config.stash.setdefault(SUITE_ERRORS_KEY, set())
    if str(error) not in said:
        said.add(str(error))
        raise collector.CollectError(str(error))


class RolloutFailed(Exception):
    """Raised by ``runtest`` when a rollout ended in a failure class; carries no traceback worth showing."""

    def __init__(self, failure_class: str, lines: list[str]) -> None:
        super().__init__(failure_class)
        self.failure_class = failure_class
        self.lines = lines


class RolloutItem(pytest.Item):
    """One dataset row on one agent. ``task_index`` is run-wide; ``slot`` is its place in the dispatch plan.

    A row fanned out to several agents is one item per agent, all with the row's task
    index; their rollout indices continue one another from ``first_rollout``.
    """

    # In slots, not the node's ``__dict__``: eight more keys there would double its table, for each of 100k items.
    # pytest's own six per-node attributes kept in a ``__dict__`` are slots here too, so an item has no
    # ``__dict__`` at all (120 bytes an item, 12 MB at 100k rows).
    __slots__ = (
        "_report_sections",
        "agent",
        "episode",
        "extra_keyword_matches",
        "first_rollout",
        "keywords",
        "offset",
        "own_markers",
        "repeats",
        "row_index",
        "slot",
        "stash",
        "task_index",
        "user_properties",
    )

    def __init__(
        self,
        *,
        offset: int,
        row_index: int,
        agent: str,
        first_rollout: int,
        repeats: int,
        episode: bool,
        keyword_matches: set[str],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.offset = offset
        self.row_index = row_index
        self.agent = agent
        self.first_rollout = first_rollout
        self.repeats = repeats
        self.episode = episode
        # ``-k AGENT`` selects an agent's items, fanned out or not; ``-k hard`` the rows whose
        # suite-listed keyword fields hold ``hard``. The set is shared by the file's items with the
        # same names (``keyword_matches``): pytest gives each node an empty one, 216 bytes a row.
        self.extra_keyword_matches = keyword_matches
        self.task_index = -1
        self.slot = -1

    def runtest(self) -> None:
        # The run is in the stash from configuration or collection on; no import per item.
        outcomes = self.config.stash[RUN_KEY].wait(self)
        if not outcomes:
            pytest.skip("not part of the recorded materialized set this run resumes")
        # A failure class, or a result without a reward: either way no score, so no pass.
        failed = record_outcomes(self.user_properties, outcomes, self.task_index)
        if not failed:
            return
        drained = [o for o in failed if o.status == CANCELLED]
        if drained and len(drained) == len(failed):
            pytest.skip(f"{len(drained)} rollouts not started, {drained[0].detail}; --rollouts-resume runs them")
        classes = Counter(str(o.status) for o in failed)
        raise RolloutFailed(dominant_class(classes), [_describe(o) for o in failed])

    def teardown(self) -> None:
        """junitxml writes the teardown report's properties with ``str()``, a Python repr; as JSON
        text they can be read back. The call report keeps its own copy of the values."""
        self.user_properties[:] = [(name, json_property(name, value)) for name, value in self.user_properties]

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, RolloutFailed):
            return "\n".join(excinfo.value.lines)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name

    @property
    def location(self) -> tuple[str, int | None, str]:  # type: ignore[override]
        """pytest's ``(relative path, line, name)``, with the path worked out once per file, not per row."""
        return self.parent.relpath, None, self.name  # type: ignore[union-attr]


def _describe(outcome: RolloutOutcome) -> str:
    if outcome.failure_class is None:
        return f"rollout {outcome.rollout_index}: {NO_REWARD}: the reply has no numeric reward (kept, not scored)"
    # HTTP tries of this run's one attempt (retries within a run are not attempts).
    tries = f" after {outcome.attempts} tries" if outcome.attempts > 1 else ""
    # An agent that classifies its own failure may give no reason: no colon before nothing.
    detail = f": {outcome.detail}" if outcome.detail else " (the agent gave no reason)"
    return f"rollout {outcome.rollout_index}: {outcome.failure_class}{tries}{detail}"
