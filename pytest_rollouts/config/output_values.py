"""Where a run may not write or read: the checks that refuse a report, a run's output or a dataset
that is one of a run's own files (its results, sidecars, inputs, metrics, manifest), which the
write would replace or a fresh run would move aside.

Plain functions, without pydantic: the pytest side's collection checks each dataset with them as
the settings model checks its outputs (the outputs' field types are in ``fields.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_rollouts.store.artifacts import ArtifactPaths


def report_clash(report: Path | None, runs: Mapping[str, Path | ArtifactPaths | None]) -> str | None:
    """Why ``report`` may not be written where it is asked: it is one of the runs' own files (its
    results, sidecars, inputs, metrics, manifest), which the report would replace. None if it may.
    ``runs``: each run's output, or its files, by the words that name it ("this run", "the baseline")."""
    if report is None:
        return None
    from pytest_rollouts.store.artifacts import ArtifactPaths

    target = report.resolve()
    for words, run in runs.items():
        files = () if run is None else (run if isinstance(run, ArtifactPaths) else ArtifactPaths(run)).all()
        if target in {path.resolve() for path in files}:
            return f"{report} is one of {words}'s files; the report would replace it: name an .html file"
    return run_file_clash(report, "the report")


def dataset_clash(
    dataset: Path,
    run: ArtifactPaths,
    report: Path | None,
    options: str = "--rollouts-out, --rollouts-html, --rollouts-materialized",
) -> str | None:
    """Why this run may not read ``dataset``: it is one of the files the run writes (its output, a
    sidecar, the materialized inputs, the metrics, the manifest, the report), which a fresh run
    moves aside or the run replaces, the dataset lost before or after it is read. None if not."""
    target = dataset.resolve()
    mine = {path.resolve(): path for path in (*run.all(), *([report] if report is not None else []))}
    if target not in mine:
        return None
    return (
        f"{dataset} is a dataset of this run and one of the files it writes ({mine[target].name}), which "
        f"would move it aside or replace it: give the run's files other names ({options})"
    )


def run_file_clash(path: Path, what: str, *, its_own_output: bool = False) -> str | None:
    """Why ``what`` may not be written at ``path``: it is a file of a run found there, any run (a
    report, a comparison's JSON or another run's output would replace its rows). None if it may.
    ``its_own_output``: ``what`` is a run's output, which may be an earlier output of that name (a
    fresh run moves it aside), never another run's sidecar, inputs, metrics or manifest."""
    from pytest_rollouts.store.artifacts import owning_run

    run = owning_run(path)
    if run is None or (its_own_output and run.out.resolve() == path.resolve()):
        return None
    return f"{path} is one of the files of the run at {run.out}; {what} would replace it: name another file"


def materialized_clash(materialized: Path | None, out: Path | None) -> bool:
    """Whether ``--rollouts-materialized`` names one of the run's other files, which it would replace."""
    if materialized is None or out is None:
        return False
    from pytest_rollouts.store.artifacts import ArtifactPaths

    run = ArtifactPaths(out)
    return materialized.resolve() in {p.resolve() for p in (run.out, run.failures, run.metrics, run.manifest)}
