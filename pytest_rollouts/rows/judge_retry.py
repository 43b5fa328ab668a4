"""Moving an earlier run's judged-invalid results out of the output (NeMo Gym's ``migrate_invalid_judge_main_rows``).

A run without ``retry_invalid_judge_responses`` (or NeMo Gym's older builds) stored a result
with ``invalid_judge_response: true`` as a score: it counts in the metrics, and resume takes it
as done. A resume that opts in moves each one to the failures sidecar as a ``judge_invalid``
row, so it leaves the score and is sent again.

Sidecar first, then the output: each moved row is appended with a marker, and the output is
then replaced whole (``replaced_atomically``: written, fsynced, renamed). A crash between the
two leaves the rows in both files; the next resume finds their markers and only finishes the
rewrite, so no row is moved twice and none is lost. A crash during the rewrite leaves the old
output whole.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from pytest_rollouts.rows.resume import key_of
from pytest_rollouts.rows.schema import ATTEMPT_INDEX, MIGRATED_INVALID_JUDGE, judged_invalid, migrated_judge_row
from pytest_rollouts.store.artifacts import ArtifactPaths, artifact_rows, read_rows
from pytest_rollouts.store.jsonl import JsonlAppender, JsonlError, replaced_atomically, scan_lines

Marker = tuple[int, int, int]


def migrate_invalid_judge_rows(out: Path, failures: Path) -> int:
    """Move the output's judged-invalid results to the sidecar; how many left the output.

    Call it with the files prepared for a resume (a cut last line repaired) and no other writer.
    A malformed line moves nothing: the resume's plan then refuses the run, naming it.
    """
    try:
        legacy = [entry for entry in artifact_rows(out) if judged_invalid(entry.row)]
        if not legacy:
            return 0
        moved = {_marker(row) for row in read_rows(failures) if row.get(MIGRATED_INVALID_JUDGE) is True}
    except (JsonlError, KeyError, TypeError, ValueError):
        return 0
    sidecar = JsonlAppender(failures)
    try:
        for entry in legacy:
            if _marker(entry.row) not in moved:
                sidecar.append(migrated_judge_row(entry.row))
                moved.add(_marker(entry.row))
    finally:
        sidecar.close()  # fsynced before the output loses a row
    gone = {entry.line_no for entry in legacy}
    with replaced_atomically(out) as kept:
        for line_no, _, line in scan_lines(out):
            if line_no not in gone:
                kept.write(line)
    return len(legacy)


def _marker(row: dict) -> Marker:
    """Which attempt of which rollout a moved row was: a result is one attempt's, so this names it."""
    task, rollout = key_of(row)
    return task, rollout, int(row.get(ATTEMPT_INDEX) or 0)


def resume_mend(paths: ArtifactPaths, opted_in: bool) -> Callable[[], object] | None:
    """What ``start_run`` calls on a resume: the move, for a run that opted in; nothing otherwise
    (other verifiers score an invalid judge response as a zero on purpose)."""
    return partial(migrate_invalid_judge_rows, paths.out, paths.failures) if opted_in else None
