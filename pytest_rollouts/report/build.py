"""Build a run's report and write it: one call for the ``report`` command, the end of a pytest
session, the Python API and exporters that attach the file to a run elsewhere.

A caller that scored the run hands its score and verdict, so the page shows exactly what the
run's end said; without them they are rebuilt from the files (``summary.score_from_files``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_rollouts.report.charts import charts, concurrency_limits
from pytest_rollouts.report.gather import RunData, gather
from pytest_rollouts.report.page import render
from pytest_rollouts.report.rollouts import TEXT_CAP
from pytest_rollouts.report.summary import comparison, score_from_files, summary
from pytest_rollouts.scoring.gate import Gate
from pytest_rollouts.scoring.multiplicity import NONE
from pytest_rollouts.store.jsonl import ArtifactError, replaced_atomically

if TYPE_CHECKING:
    from pytest_rollouts.scoring.aggregate import RunScore
    from pytest_rollouts.scoring.verdict import Verdict

# The table's columns, in the order of each row's array.
COLUMNS = ("task", "rollout", "group", "reward", "status", "latency", "attempts", "answer")


def build_report(
    out: Path,
    *,
    score: RunScore | None = None,
    verdict: Verdict | None = None,
    baseline: Path | None = None,
    gate: Gate | None = None,
    title: str | None = None,
    correction: str = NONE,
    sequential_test: bool = False,
) -> bytes:
    """The report of the run at ``out`` (its ``<stem>.jsonl``), as the bytes of one HTML file.

    ``score``, ``verdict``: the run's, when the caller scored it; else rebuilt from the files,
    judged by ``gate`` (default: the default gate). ``baseline``: a run to compare with, when
    ``score`` holds no comparison already (its groups' p-values adjusted by ``correction``, with their
    confidence sequences by ``sequential_test``). Raises
    ``FileNotFoundError`` naming a missing file and ``JsonlError`` for a bad line.
    """
    out = Path(out)
    data = gather(out)
    if score is None or verdict is None:
        score, verdict = score_from_files(out, gate or Gate(), baseline, correction, sequential_test)
    elif baseline is not None and score.baseline is None:
        score.baseline = comparison(baseline, out, correction, sequential_test)
    page = {
        "title": title or f"Rollouts report: {out.name}",
        "out": str(out),
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "text_cap": TEXT_CAP,
        "summary": summary(score, verdict, out),
        "charts": {**charts(data), "concurrency": concurrency_limits([(g.agent, g.metrics) for g in score.groups])},
        # A flipped task's label (its id, when the comparison paired by id) to its index in the table.
        "task_labels": {task.label: t for t, task in data.tasks.items()} if score.baseline is not None else {},
        **_table(data),
    }
    return render(page["title"], page, _details(data))


def write_report(path: Path, out: Path, **options: Any) -> Path:
    """``build_report(out, **options)`` written to ``path`` atomically (a reader sees the old file or
    the whole new one); ``ArtifactError`` when it cannot be written. Returns ``path``."""
    body = build_report(out, **options)
    # Through a link to its target (replacing it would leave the target as it was); into a device or
    # a pipe as it is (``/dev/stdout``; a rename would put a regular file where the node was).
    target = Path(path).resolve()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() and not target.is_file():
            with open(target, "wb") as handle:
                handle.write(body)
            return Path(path)
    except OSError as exc:
        raise ArtifactError(f"cannot write {path}: {exc.strerror or exc}") from exc
    with replaced_atomically(target) as handle:
        handle.write(body)
    return Path(path)


def report_at_end(path: Path, out: Path, score: RunScore, verdict: Verdict) -> str:
    """A run's end writes its report (``--rollouts-html``, ``html=``): the line that says where, or
    why it could not. The report comes after the results and is no part of them, so no error of its
    own (a full disk, a bug) may fail a run that produced them: it is said, and the run goes on."""
    try:
        write_report(path, out, score=score, verdict=verdict)
    except Exception as exc:  # see above: whatever broke, the run's results and status stand
        why = str(exc) if isinstance(exc, OSError | ValueError) else f"{type(exc).__name__}: {exc}"
        return f"the report could not be written to {path}: {why}; the run's results are unaffected"
    return f"report written to {path}"


def _table(data: RunData) -> dict[str, Any]:
    """Every rollout as a short array (``COLUMNS``), with groups and statuses as indices into lists."""
    groups = sorted({r.group for r in data.rollouts})
    statuses = sorted({r.status for r in data.rollouts})
    group_at = {g: i for i, g in enumerate(groups)}
    status_at = {s: i for i, s in enumerate(statuses)}
    rows = [
        [r.task, r.rollout, group_at[r.group], r.reward, status_at[r.status], r.latency, r.attempts, r.answer]
        for r in data.rollouts
    ]
    return {"columns": COLUMNS, "groups": groups, "statuses": statuses, "rows": rows}


def _details(data: RunData) -> dict[str, Any]:
    """What opening a rollout shows, row by row as in the table; a task's prompt once for all its rollouts."""
    return {
        "tasks": {str(t): [task.prompt, task.fields] for t, task in data.tasks.items()},
        "rollouts": [[r.items, r.fields, r.failure] for r in data.rollouts],
    }
