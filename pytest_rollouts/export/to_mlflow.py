"""A run logged to MLflow: one MLflow run in the experiment named, with the run's numbers, its
coverage line and its files.

The tracking server is MLflow's to find (``MLFLOW_TRACKING_URI``, with its own credentials
variables); nothing here reads them. ``MlflowClient`` is used rather than ``mlflow.start_run``:
a script or trainer calling the Python API may have an MLflow run of its own active, which this
must neither log into nor end.

A metric's name MLflow would refuse (a character it does not take, an empty or ``..`` part of
its path, more than 250 characters) failed the whole ``log_batch``, so one odd name an agent
sent lost every number. Each is renamed where a name MLflow takes says the same (``a//b`` is
``a/b``), else left out; the line that says where the run went names both.
"""

from __future__ import annotations

import re
import time
from dataclasses import field

from pytest_rollouts.datatype import datatype
from pytest_rollouts.export.contents import RunExport

# MLflow takes at most this many metrics in one ``log_batch``.
BATCH = 1000
# Characters MLflow refuses in a metric's name. ``pass@k`` and ``pass^k`` are spelled out first, so
# the two stay apart.
SPELLED = {"@": "_at_", "^": "_hat_"}
REFUSED = re.compile(r"[^\w\-. :/]")
# MLflow's longest metric name.
MAX_NAME = 250
# How many renamed or left-out names the line shows; it counts the rest.
SHOWN = 5


def log_to_mlflow(experiment: str, export: RunExport) -> str:
    """One MLflow run in ``experiment`` (created when missing): metrics, params, the coverage line
    as the tag ``rollouts.coverage``, and the files as artifacts; which run it is. It ends FINISHED,
    or FAILED when logging broke off (and the error propagates)."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    client = MlflowClient()
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
    run_id = client.create_run(experiment_id, run_name=export.name).info.run_id
    status = "FAILED"
    try:
        now = int(time.time() * 1000)
        names = MlflowNames.of(export.metrics)
        metrics = [
            Metric(names.kept[name], value, now, 0) for name, value in export.metrics.items() if name in names.kept
        ]
        params = [Param(name, value) for name, value in export.params.items()]
        client.log_batch(
            run_id, metrics=metrics[:BATCH], params=params, tags=[RunTag("rollouts.coverage", export.coverage)]
        )
        for start in range(BATCH, len(metrics), BATCH):
            client.log_batch(run_id, metrics=metrics[start : start + BATCH])
        for path in export.files:
            client.log_artifact(run_id, str(path))
        status = "FINISHED"
    finally:
        client.set_terminated(run_id, status)
    return f"run {run_id} in experiment {experiment!r}{names.note()}"


def mlflow_name(name: str) -> str:
    """``name`` as MLflow takes a metric's name (``pass@1/reward`` is ``pass_at_1/reward``, ``a//b``
    is ``a/b``), which may still be too long or empty."""
    # MLflow takes a name only as the path it normalizes to: no empty, ``.`` or ``..`` part.
    parts = [{".": "_", "..": "__"}.get(part, part) for part in REFUSED.sub("_", _routine(name)).split("/") if part]
    return "/".join(parts)


@datatype
class MlflowNames:
    """The run's metric names as MLflow takes them: ``kept`` maps each logged name to MLflow's, and
    what had to change beyond the spelling every run has (``@``, ``^``) is said."""

    kept: dict[str, str] = field(default_factory=dict)
    renamed: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, metrics: dict[str, float]) -> MlflowNames:
        names = cls()
        taken: dict[str, str] = {}
        for name in metrics:
            spelled = mlflow_name(name)
            if not spelled:
                names.left_out.append(f"{name!r} (no name left)")
            elif len(spelled) > MAX_NAME:
                names.left_out.append(f"{_short(name)} (over {MAX_NAME} characters)")
            elif spelled in taken:
                names.left_out.append(f"{_short(name)} (the same MLflow name as {_short(taken[spelled])})")
            else:
                taken[spelled] = name
                names.kept[name] = spelled
                if spelled != _routine(name):
                    names.renamed.append(f"{_short(name)} as {_short(spelled)}")
        return names

    def note(self) -> str:
        """What the run's line adds: the names MLflow got otherwise, or none."""
        said = [(self.renamed, "renamed for MLflow"), (self.left_out, "left out, a name MLflow refuses")]
        return "".join(f"; {len(items)} metrics {what}: {_listed(items)}" for items, what in said if items)


def _routine(name: str) -> str:
    """The spelling every run's names get (``@``, ``^``), which is not worth saying."""
    for char, spelled in SPELLED.items():
        name = name.replace(char, spelled)
    return name


def _short(name: str) -> str:
    return repr(name if len(name) <= 60 else name[:57] + "...")


def _listed(items: list[str]) -> str:
    more = f", and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more
