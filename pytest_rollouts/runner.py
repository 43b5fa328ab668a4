"""The Python API's door to a whole run: ``run_from_config`` does for a script what the plugin does
for a pytest session, through the same lifecycle (``lifecycle/``), so it leaves the same files and
the same numbers. This module only adapts: a config in, a ``RunResult`` out, refusals raised as
``CollectionRefused``, notices as ``CollectionWarning``s; ``run`` is the synchronous twin, for scripts.

Refusals (a bad config, a bad row, an output another run holds, unhealthy agents) raise
``CollectionRefused`` before any request is sent, and a fresh run refused so puts the earlier
results back. A failed rollout never raises: it is a row of the failures sidecar, and counted.
"""

from __future__ import annotations

import asyncio
import sys
import warnings
from collections.abc import Mapping
from typing import Any

from pytest_rollouts.config.collection import CollectionConfig
from pytest_rollouts.dispatch.inprocess import HealthCheckFailed
from pytest_rollouts.lifecycle.in_process import run_in_process
from pytest_rollouts.lifecycle.refusal import Refusal
from pytest_rollouts.lifecycle.summary import RunSummary
from pytest_rollouts.scoring.verdict import INTERRUPTED
from pytest_rollouts.stops import TermAsInterrupt
from pytest_rollouts.store.jsonl import loads


class CollectionWarning(UserWarning):
    """What the caller of a run should know: where earlier results went, rows without request
    parameters, a routing key no row matched, an output lock taken over from a killed run."""


class CollectionRefused(ValueError):
    """The run was refused before any request was sent; the message says why."""


class RunResult(RunSummary):
    """A finished run: its score from the files on disk, and the verdict of its gates."""

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The metrics file as written: each group's metrics (its server's ``/aggregate_metrics``, or
        computed locally) with its coverage. Empty when none was written (``no_aggregate``)."""
        path = self.score.metrics_path
        return loads(path.read_bytes()) if path is not None else []

    @property
    def mean_reward(self) -> float | None:
        return self.score.mean_reward

    @property
    def exit_status(self) -> int:
        """0, or the code the plugin would exit with (docs/scoring.md, "Exit codes")."""
        return self.verdict.exit_code

    def summary(self) -> str:
        """The run's score as the plugin's closing section words it: what became of the rollouts, the
        metrics and coverage, what the gates compared and why the run failed."""
        return "\n".join(self.lines())


async def run_from_config(config: CollectionConfig | Mapping[str, Any]) -> RunResult:
    """Run ``config`` to the end in the running event loop; its score and the verdict of its gates.

    Cancelling it stops dispatch as Ctrl-C stops the plugin: what is in flight is cancelled, the
    rows written so far are kept, and a run with ``resume=True`` goes on from them.
    """
    settings = validated(config)
    assert settings.out is not None
    try:
        summary = await run_in_process(settings, _tell)
    except Refusal as refusal:
        raise CollectionRefused(_worded(refusal)) from None
    return RunResult(**{name: getattr(summary, name) for name in RunSummary.__dataclass_fields__})


def _worded(refusal: Refusal) -> str:
    """A refusal in the API's words: a health check's names the config's fields that turn it off."""
    if refusal.where == "health":
        return f"{HealthCheckFailed(list(refusal.lines))}{refusal.undo}"
    return str(refusal)


class RunInterrupted(SystemExit, KeyboardInterrupt):
    """``run`` stopped by Ctrl-C or SIGTERM, once the rows written so far were kept and the output
    let go. A ``KeyboardInterrupt``, so a script that catches one catches this too; and a
    ``SystemExit`` with the plugin's status for a stopped run (2), so a script that does not
    catch it ends with that status after ``run``'s one line, as the plugin does, not a traceback."""


def run(config: CollectionConfig | Mapping[str, Any]) -> RunResult:
    """``run_from_config`` on an event loop of its own, for scripts. Ctrl-C or SIGTERM stops it as
    cancelling stops ``run_from_config`` (what was written is kept, a resume goes on), says so in
    a line on stderr and raises ``RunInterrupted``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("run() starts an event loop of its own; in async code, await run_from_config(config)")
    settings = validated(config)
    term = TermAsInterrupt()
    try:
        return asyncio.run(_stoppable(settings, term))
    except (KeyboardInterrupt, asyncio.CancelledError):  # asyncio.run's Ctrl-C; our SIGTERM's cancellation
        stop = "SIGTERM" if term.received else "SIGINT"
        rows = any(path.is_file() and path.stat().st_size for path in (settings.paths.out, settings.paths.failures))
        kept = f"the rows written so far are kept in {settings.out}; resume=True goes on from them"
        print(
            f"interrupted by {stop}: {kept if rows else 'before any row was written, so none is kept'}", file=sys.stderr
        )
        raise RunInterrupted(INTERRUPTED) from None


async def _stoppable(settings: CollectionConfig, term: TermAsInterrupt) -> RunResult:
    """The run, SIGTERM cancelling it as Ctrl-C does: ``run`` owns this loop and its signals."""
    task = asyncio.current_task()
    assert task is not None
    with term.taken(task):
        return await run_from_config(settings)


def validated(config: CollectionConfig | Mapping[str, Any]) -> CollectionConfig:
    """``config`` checked as the plugin checks its options; ``ValueError`` says what is wrong."""
    if isinstance(config, CollectionConfig):
        return config
    if not isinstance(config, Mapping):
        raise ValueError(
            f"a run's config is a CollectionConfig or a mapping of its fields, not {type(config).__name__}"
        )
    return CollectionConfig(**{str(key): value for key, value in config.items()})


def _tell(notices: list[str]) -> None:
    """Each notice as a warning from the caller's line: the first frame neither ours nor asyncio's
    (a fixed stack level lands in asyncio's event loop when ``run`` drives the coroutine)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__", "").partition(".")[0] in INTERNAL:
        frame = frame.f_back
    for notice in notices:
        warnings.warn_explicit(
            CollectionWarning(notice),
            CollectionWarning,
            frame.f_code.co_filename,
            frame.f_lineno,
            frame.f_globals.get("__name__"),
        )


# The packages between a caller and a notice.
INTERNAL = frozenset({"pytest_rollouts", "asyncio"})
