"""A run's files around its start: what the user is told when earlier results are moved aside,
deleted or a cut line repaired, and putting them back when the run is refused before any request."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pytest_rollouts.store.artifacts import ArtifactPaths, RunStart


def start_notices(
    start: RunStart,
    out: Path,
    *,
    resume: str | None,
    overwrite: str,
    shown: Callable[[Path], str] = str,
) -> list[str]:
    """What to tell about a run's start, naming the options the way the caller's user gives them
    (``resume``: None where there is nothing to resume, as for the merge).

    Moving aside says how many earlier sets now lie beside the output: every rerun leaves one,
    and the user should learn that they pile up, and how not to."""
    notices = []
    if start.moved_to is not None and not start.replaced:
        instead = ([f"{resume} continues a run instead"] if resume else []) + [f"{overwrite} replaces them"]
        notices.append(
            f"earlier results were moved to {shown(start.moved_to)}; {_sets(start.kept)} kept beside "
            f"{shown(out)} ({', '.join(instead)})"
        )
    if start.replaced:
        still = f"; {_sets(start.kept)} still kept beside it" if start.kept else ""
        notices.append(f"earlier results at {shown(out)} were deleted ({overwrite}){still}")
    for path, size in (start.repaired or {}).items():
        notices.append(f"{shown(path)}: dropped a last line cut short by a crash ({size} bytes)")
    return notices


def _sets(count: int) -> str:
    return f"{count} earlier set is" if count == 1 else f"{count} earlier sets are"


def put_back(paths: ArtifactPaths, start: RunStart, *, resuming: bool) -> str:
    """A run refused before any request leaves the files as it found them; what to add to the
    refusal. A resumed run moved nothing; an overwriting one kept what it replaces until then.
    The run lock's file is its holder's to withdraw, after this."""
    if start.made_prepared:
        paths.prepared.unlink(missing_ok=True)
    if resuming:
        return ""
    paths.take_back(start)
    if start.moved_to is None:
        return ""
    return "\nThe earlier results are back in place" + ("." if start.replaced else f" (from {start.moved_to}).")
