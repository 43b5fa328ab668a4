"""A run logged to MLflow: one MLflow run in the experiment named, with the run's numbers, its
coverage line and its files.

The tracking server is MLflow's to find (``MLFLOW_TRACKING_URI``, with its own credentials
variables); nothing here reads them. ``MlflowClient`` is used rather than ``mlflow.start_run``:
a script or trainer calling the Python API may have an MLflow run of its own active, which this
must neither log into nor end.
"""

from __future__ import annotations

import re
import time

from pytest_rollouts.export.contents import RunExport

# MLflow takes at most this many metrics in one ``log_batch``.
BATCH = 1000
# Characters MLflow refuses in a metric's name. ``pass@k`` and ``pass^k`` are spelled out first, so
# the two stay apart.
SPELLED = {"@": "_at_", "^": "_hat_"}
REFUSED = re.compile(r"[^\w\-. :/]")


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
        metrics = [Metric(mlflow_name(name), value, now, 0) for name, value in export.metrics.items()]
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
    return f"run {run_id} in experiment {experiment!r}"


def mlflow_name(name: str) -> str:
    """``name`` as MLflow takes a metric's name: ``pass@1/reward`` is ``pass_at_1/reward``."""
    for char, spelled in SPELLED.items():
        name = name.replace(char, spelled)
    return REFUSED.sub("_", name)
