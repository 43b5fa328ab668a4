"""Which environment server fronted which agent in a run, for those who read its files alone.

Rows routed by their agent are materialized unstamped, as NeMo Gym writes them, while their
results are stamped with the server they went through; scoring groups both under the server
(``records.metrics_group``). Our runs record the map in their manifest (``plan.build.fronted_by``);
a run of NeMo Gym's collector has no manifest, but every row it stored names both, its agent and
the server, as NeMo Gym's own ``_call_aggregate_metrics`` reads them.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_rollouts.rows.episodes import taskset_of
from pytest_rollouts.rows.manifest import ManifestError, read_manifest
from pytest_rollouts.rows.schema import ENVIRONMENT_SERVER
from pytest_rollouts.store.artifacts import ArtifactPaths, read_rows


def recorded_fronted_by(paths: ArtifactPaths) -> dict[str, str]:
    """The run's agent-to-server map: its manifest's, else the one its stored rows show (a damaged
    manifest is refused by resume and the merge, not here)."""
    try:
        recorded = read_manifest(paths.manifest)
    except ManifestError:
        recorded = None
    if recorded is not None:
        return recorded.fronted_by
    found: dict[str, str] = {}
    for path in (paths.out, paths.failures):
        for row in read_rows(path):
            server, ref = row.get(ENVIRONMENT_SERVER), row.get("agent_ref")
            agent = ref.get("name") if isinstance(ref, Mapping) else None
            if isinstance(server, str) and server and isinstance(agent, str) and agent and taskset_of(row) is None:
                found.setdefault(agent, server)
    return found
