"""A run logged to Weights & Biases: one W&B run in the project named, with the run's numbers, its
coverage line and its files.

W&B finds its own settings and credentials (``WANDB_API_KEY``, ``WANDB_MODE``, ``WANDB_DIR``,
``WANDB_ENTITY``, ...); nothing here reads them. ``reinit="create_new"``: a trainer calling the
Python API may have a W&B run of its own, which this must neither log into nor finish.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pytest_rollouts.export.contents import RunExport


def log_to_wandb(project: str, export: RunExport) -> str:
    """One W&B run in ``project``: the numbers logged once (so they are its summary too), the
    params as its config, the coverage line as the summary's ``coverage``, and the files saved
    with it; where it is. It ends finished, or with exit code 1 when logging broke off (and the
    error propagates)."""
    import wandb

    # No system metadata: W&B records the process's command line there (``program``, ``args``), where
    # an agent's URL with its password or a header's value given as an option would be uploaded.
    settings = wandb.Settings(
        silent=True, console="off", save_code=False, disable_git=True, x_disable_stats=True, x_disable_meta=True
    )
    run = wandb.init(
        project=project, name=export.name, config=export.params, job_type="eval", reinit="create_new", settings=settings
    )
    exit_code = 1
    try:
        run.log(export.metrics)
        run.summary["coverage"] = export.coverage
        for path in export.files:
            # A copy in the run's own folder: the file as it was at the end of the run, saved without
            # the warning W&B prints for a file it links from elsewhere.
            copy = Path(run.dir) / path.name
            shutil.copyfile(path, copy)
            run.save(str(copy), base_path=run.dir, policy="now")
        exit_code = 0
    finally:
        run.finish(exit_code=exit_code)
    # Offline, a run has no address yet: its folder is what ``wandb sync`` takes.
    return f"run in {Path(run.dir).parent} (offline; wandb sync uploads it)" if run.offline else f"run {run.url}"
