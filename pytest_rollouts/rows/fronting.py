"""Which environment server fronted which agent in a run, for those who read its files alone.

Rows routed by their agent are materialized unstamped, as NeMo Gym writes them, while their
results are stamped with the server they went through; scoring groups both under the server
(``records.metrics_group``). Our runs record the map in their manifest (``plan.build.fronted_by``);
a run of NeMo Gym's collector has no manifest, but every row it stored names both, its agent and
the server, as NeMo Gym's own ``_call_aggregate_metrics`` reads them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_rollouts.rows.episodes import taskset_of
from pytest_rollouts.rows.manifest import ManifestError, RunManifest, read_manifest
from pytest_rollouts.rows.schema import ENVIRONMENT_SERVER
from pytest_rollouts.store.artifacts import ArtifactPaths
from pytest_rollouts.store.jsonl import object_from, scan_lines


def recorded_fronted_by(paths: ArtifactPaths) -> dict[str, str]:
    """The run's agent-to-server map: its manifest's, else the one its stored rows show. Damage is
    not judged here: resume and the merge refuse a damaged manifest, and the readers that go on to
    read the rows name a bad one by its file and line; a line that is no row tells nothing."""
    try:
        recorded = read_manifest(paths.manifest)
    except ManifestError:
        recorded = None
    return fronted_by_of(paths, recorded)


def fronted_by_of(paths: ArtifactPaths, recorded: RunManifest | None) -> dict[str, str]:
    """``recorded_fronted_by`` for a reader that has the run's manifest already (None: it has none)."""
    if recorded is not None:
        return recorded.fronted_by
    found: dict[str, str] = {}
    for row in _rows(paths.out, paths.failures):
        server, ref = row.get(ENVIRONMENT_SERVER), row.get("agent_ref")
        agent = ref.get("name") if isinstance(ref, Mapping) else None
        if isinstance(server, str) and server and isinstance(agent, str) and agent and taskset_of(row) is None:
            found.setdefault(agent, server)
    return found


def _rows(*paths: Path) -> Iterator[dict[str, Any]]:
    for path in paths:
        if not path.exists():
            continue
        for _, _, line in scan_lines(path):
            try:
                row = object_from(line)
            except ValueError:
                continue
            yield row
