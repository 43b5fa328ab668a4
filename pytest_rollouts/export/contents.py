"""What an export logs of a run, one shape for every destination: numbers, the coverage line, files.

Numbers are flat ``name: value`` pairs, ``<group>/<metric>`` for each group's metrics (its
``key_metrics`` and the scalars of its ``agent_metrics``, as in the metrics file),
``<group>/coverage/<count>`` for its coverage, and ``run/...`` for the whole run. Nothing
here reads the environment or the settings, so no secret can reach what is logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_rollouts.datatype import datatype

if TYPE_CHECKING:
    from pytest_rollouts.net.auth import Redactor
    from pytest_rollouts.scoring.accounting import Coverage
    from pytest_rollouts.scoring.aggregate import RunScore


@datatype(frozen=True)
class RunExport:
    """One run as exports log it."""

    # The run's name where it is logged: its output's stem.
    name: str
    metrics: dict[str, float]
    # The run's coverage line, as its ``rollouts`` section says it.
    coverage: str
    # Plain facts about the run (where its files are), never a setting that could hold a secret.
    params: dict[str, str] = field(default_factory=dict)
    # The metrics file and the report, those that exist.
    files: list[Path] = field(default_factory=list)

    def redacted(self, secrets: Redactor) -> RunExport:
        """This export with every secret the run holds cut out of its texts. They are redacted where
        they are made already (a row, a metrics reply); this is the last look before they leave
        the machine, where a secret could not be taken back."""
        return RunExport(
            secrets(self.name),
            {secrets(name): value for name, value in self.metrics.items()},
            secrets(self.coverage),
            {name: secrets(value) for name, value in self.params.items()},
            self.files,
        )


def run_export(score: RunScore, out: Path, report: Path | None = None) -> RunExport:
    """``score`` as exports log it; ``report``: the HTML report, logged when it was written."""
    metrics: dict[str, float] = {}
    for group in score.groups:
        for section in ("agent_metrics", "key_metrics"):
            metrics.update(
                (f"{group.agent}/{name}", value) for name, value in _numbers(group.metrics.get(section)).items()
            )
        metrics.update(_coverage(f"{group.agent}/coverage", group.coverage))
    metrics.update(_coverage("run/coverage", score.coverage))
    if score.mean_reward is not None:
        metrics["run/mean_reward"] = score.mean_reward
    files = [Path(path) for path in (score.metrics_path, report) if path is not None and Path(path).is_file()]
    return RunExport(out.stem, metrics, score.coverage.outcomes().line(), {"out": str(out)}, files)


def _numbers(section: Any) -> dict[str, float]:
    """A metrics section's finite numbers (a NaN a server sent is no number to chart)."""
    if not isinstance(section, Mapping):
        return {}
    return {
        str(name): float(value)
        for name, value in section.items()
        if isinstance(value, int | float)
        and not isinstance(value, bool)
        and value == value
        and abs(value) != float("inf")
    }


def _coverage(prefix: str, coverage: Coverage) -> dict[str, float]:
    counts = {
        "expected": coverage.expected,
        "completed": coverage.completed,
        "scored": coverage.scored,
        "missing": coverage.missing,
        "masked": coverage.masked,
        "unrewarded": coverage.unrewarded,
        "failed": coverage.failed,
    }
    numbers = {f"{prefix}/{name}": float(count) for name, count in counts.items()}
    if coverage.expected:
        numbers[f"{prefix}/scored_fraction"] = coverage.scored / coverage.expected
    return numbers
