"""A run's files around its start: what the user is told when earlier results are moved aside or a
cut line repaired, and putting them back when the run is refused before any request."""

from __future__ import annotations

from pytest_rollouts.store.artifacts import ArtifactPaths, RunStart


def start_notices(start: RunStart, resume_option: str) -> list[str]:
    """What to tell about a run's start; ``resume_option``: how the caller asks to resume."""
    notices = []
    if start.moved_to is not None:
        notices.append(f"earlier results were moved to {start.moved_to} (use {resume_option} to continue a run instead)")
    for path, size in (start.repaired or {}).items():
        notices.append(f"{path}: dropped a last line cut short by a crash ({size} bytes)")
    return notices


def put_back(paths: ArtifactPaths, start: RunStart, *, resuming: bool) -> str:
    """A fresh run refused before any request leaves the files as it found them; what to add to
    the refusal. A resumed run moved nothing."""
    if resuming:
        return ""
    paths.take_back(start)
    return "" if start.moved_to is None else f"\nThe earlier results are back in place (from {start.moved_to})."
