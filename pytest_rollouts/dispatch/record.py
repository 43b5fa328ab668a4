"""How a dispatch went, beyond its rows: each adaptive limit over time and each agent's retries.

The dispatcher process sends it when it closes (``messages.Closed``); an xdist worker hands it to
its controller; the run's metrics file (each agent's ``dispatch`` entry), its summary and its
report show it.

Its types are not frozen, as the messages' are not (``messages.py``): both processes build them at
every start-up, and a frozen dataclass costs nearly twice as much to build (``docs/performance.md``);
their fields hold lists and dicts, so they were never hashable, and a record is never changed in
place (``merged`` makes a new one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pytest_rollouts.datatype import datatype


@datatype(slots=True)
class LimitSeries:
    """One agent's limit over time: ``points`` are ``[seconds since dispatch began, limit]``."""

    agent: str
    ceiling: int
    points: list[list[float]]
    # The xdist worker whose dispatcher it was ("": this process's).
    worker: str = ""


@datatype(slots=True)
class DispatchRecord:
    """How dispatch went, for the metrics file and the summary: each adaptive limit over time
    (none unless ``--rollouts-parallel auto:MAX``), the retries sent and those the budget refused."""

    limits: list[LimitSeries] = dataclasses.field(default_factory=list)
    # By agent: retries sent, and those the run's retry budget refused.
    retries: dict[str, int] = dataclasses.field(default_factory=dict)
    retries_refused: dict[str, int] = dataclasses.field(default_factory=dict)

    def merged(self, other: DispatchRecord, worker: str = "") -> DispatchRecord:
        """This record and ``other`` (a later dispatcher's, or ``worker``'s under xdist) as one."""
        limits = [dataclasses.replace(series, worker=worker) if worker else series for series in other.limits]
        return DispatchRecord(
            self.limits + limits,
            _added(self.retries, other.retries),
            _added(self.retries_refused, other.retries_refused),
        )

    def as_report(self) -> dict[str, Any]:
        """Plain data, as an xdist worker tells its controller (``from_report`` reads it back)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> DispatchRecord:
        limits = [LimitSeries(**series) for series in report["limits"]]
        return cls(limits, dict(report["retries"]), dict(report["retries_refused"]))

    def by_agent(self) -> dict[str, dict[str, Any]]:
        """Each agent's ``dispatch`` entry in the metrics file: its retries sent and refused by the
        budget, and its adaptive limit over time (one series per dispatching process)."""
        entries: dict[str, dict[str, Any]] = {}
        for name in sorted(self.retries.keys() | self.retries_refused.keys()):
            refused = self.retries_refused.get(name, 0)
            entries[name] = {"retries": self.retries.get(name, 0), "retries_refused_by_budget": refused}
        for series in self.limits:
            shown = {"ceiling": series.ceiling, "points": series.points}
            shown = {"worker": series.worker, **shown} if series.worker else shown
            entries.setdefault(series.agent, {}).setdefault("concurrency_limit", []).append(shown)
        return entries

    def summary_lines(self) -> list[str]:
        """What a run's summary says of them: retries the budget refused, each adaptive limit's end."""
        lines = []
        refused = sum(self.retries_refused.values())
        if refused:
            sent = sum(self.retries.values())
            lines.append(
                f"retry budget: {refused} retries refused ({sent} sent); their failures are in the failures "
                "sidecar, --rollouts-resume sends them again (up to --rollouts-max-attempts)"
            )
        for series in self.limits:
            limits = [int(limit) for _, limit in series.points]
            where = f" ({series.worker})" if series.worker else ""
            lines.append(
                f"adaptive limit of {series.agent}{where}: {limits[-1]} at the end, {min(limits)} to "
                f"{max(limits)} over the run (at most {series.ceiling})"
            )
        return lines


def _added(one: Mapping[str, int], other: Mapping[str, int]) -> dict[str, int]:
    return {name: one.get(name, 0) + other.get(name, 0) for name in sorted(one.keys() | other.keys())}
