"""The exports a run asked for, each tried once at its end; a failed one is a line to show, never
a lost result or a changed exit status.

The run's rows and metrics file are written before any export starts, so an export that fails
(a server down, a key refused, a package broken) costs only the export: the line says which one
and why, with every secret the environment holds cut out of it, since an error can quote a
request (an API key, a password in a tracking URI) and the line lands in CI logs.

Each export runs in a process of its own (``process.py``), which a stop (Ctrl-C, SIGTERM) kills:
a tracking server that hangs or keeps failing would otherwise hold the run for as long as its
client retries (minutes). The results are on disk already, so nothing of them is lost; the
caller learns which export was cut short from ``ExportInterrupted``, a ``KeyboardInterrupt``
still.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_rollouts.export.contents import run_export
from pytest_rollouts.export.process import ExportFailed, export_in_process
from pytest_rollouts.net.auth import Redactor

if TYPE_CHECKING:
    from pytest_rollouts.scoring.aggregate import RunScore

# Environment variables whose values are secrets by their name (WANDB_API_KEY, MLFLOW_TRACKING_TOKEN,
# MLFLOW_TRACKING_PASSWORD, AWS_SECRET_ACCESS_KEY, ...).
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
# The user and password of a URL (``https://user:password@host``): whatever URL an error quotes.
URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")
# An error's first characters say what failed; a whole server page would bury the run's summary.
MAX_CHARS = 500


class ExportInterrupted(KeyboardInterrupt):
    """A stop cut an export short: its message says which, the lines of those done before it in
    ``lines``."""

    def __init__(self, message: str, lines: list[str]) -> None:
        super().__init__(message)
        self.lines = lines


def export_run(
    destinations: Mapping[str, str | None],
    score: RunScore,
    out: Path,
    report: Path | None = None,
    *,
    secrets: Redactor,
) -> list[str]:
    """Log ``score`` to each destination given (``{"wandb": PROJECT, "mlflow": EXPERIMENT}``, None
    for one not asked); a line for each, saying where the run went or why it did not.
    ``report``: the HTML report, if one was written; ``secrets``: the run's (``Agents.secrets``),
    left out of all that is logged and said. A stop raises ``ExportInterrupted``, the later
    destinations untried."""
    asked = {name: target for name, target in destinations.items() if target}
    if not asked:
        return []
    export = run_export(score, out, report).redacted(secrets)
    lines = []
    for name, target in asked.items():
        try:
            lines.append(f"{name}: logged {export_in_process(name, target, export)}")
        except (ExportFailed, OSError) as exc:  # the run's results stand
            lines.append(f"{name} export to {target!r} failed, the results are on disk: {scrubbed(str(exc), secrets)}")
        except KeyboardInterrupt as stop:
            why = f"Interrupted while exporting to {name} ({target!r})"
            raise ExportInterrupted(secrets(why), lines) from stop
    return lines


def scrubbed(error: str, secrets: Redactor) -> str:
    """``error`` in one line, without the run's secrets, the environment's or a URL's credentials."""
    values = {name: value for name, value in os.environ.items() if SECRET_NAME.search(name)}
    line = secrets(" ".join(part.strip() for part in error.strip().splitlines()))
    line = URL_CREDENTIALS.sub("[redacted]@", line)
    return Redactor({"environment": values}).cut(line, MAX_CHARS)
