"""Scoring holds numbers per rollout, not objects: a million rollouts are scored in a few hundred MB.

Measured with ``tracemalloc`` (bytes Python allocated, the same on every run), never with a clock.
A few thousand rollouts tell the bytes per rollout apart from what scoring holds whatever the run's
size, once that is made small too: the output is read in pieces of 64 KiB, not 1 MiB (one piece is
held while it is parsed), and a first scoring run pays for the imports and caches the measured one
does not.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import orjson
import pytest

from pytest_rollouts.scoring import output_scan
from pytest_rollouts.scoring.accounting import ScoringPolicy
from pytest_rollouts.scoring.aggregate import score_run
from pytest_rollouts.scoring.output_scan import OutputScan
from pytest_rollouts.store.artifacts import ArtifactPaths

from ..agents import ScriptedAgent

TASKS, REPEATS = 500, 10
ROLLOUTS = TASKS * REPEATS


@pytest.fixture(autouse=True)
def _small_read_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output_scan, "READ_CHUNK_BYTES", 1 << 16)


def _run(folder: Path, tasks: int = TASKS) -> ArtifactPaths:
    """A finished run's files: every rollout with a reward and a response's token counts."""
    folder.mkdir()
    paths = ArtifactPaths(folder / "r.jsonl")
    keys = [
        {"agent_ref": {"name": "a"}, "_ng_task_index": t, "_ng_rollout_index": r}
        for t in range(tasks)
        for r in range(REPEATS)
    ]
    paths.materialized.write_bytes(b"".join(orjson.dumps({"q": "x", **k}) + b"\n" for k in keys))
    usage = {"input_tokens": 12, "output_tokens": 30, "total_tokens": 42}
    paths.out.write_bytes(
        b"".join(
            orjson.dumps(
                {**k, "reward": (k["_ng_task_index"] + k["_ng_rollout_index"]) % 2, "response": {"usage": usage}}
            )
            + b"\n"
            for k in keys
        )
    )
    return paths


def test_the_output_scan_holds_a_few_numbers_per_rollout(tmp_path: Path) -> None:
    paths = _run(tmp_path / "run")
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        scan = OutputScan.of_files(paths)
        scan.advance()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sum(1 for group in scan.groups.values() for _, state in group.states() if state) == ROLLOUTS
    # Its key and offset (24 B), flags and output offset (9 B), five fields (40 B): objects would be a KB.
    assert (held - before) / ROLLOUTS < 120


@pytest.mark.parametrize(
    ("asked", "tasks"), [(False, TASKS), (True, 2 * TASKS)], ids=["local", "server-without-aggregate_metrics"]
)
def test_scoring_a_run_peaks_at_a_few_hundred_bytes_per_rollout(tmp_path: Path, asked: bool, tasks: int) -> None:
    """Asked first (every group's server is, as NeMo Gym asks), a server without the endpoint is
    sent every row, streamed from the file in key order; then the metrics are computed here.

    The server runs in this process: what it buffers of the rows sent (up to a few hundred KB, more
    or less from run to run) is traced too, so that run is twice as long."""
    paths = _run(tmp_path / "run", tasks)
    rollouts = tasks * REPEATS
    with ScriptedAgent() as agent:
        url = agent.url if asked else None
        first = _run(tmp_path / "first", tasks=2)
        score_run(first, ScoringPolicy(), agent_url=lambda name: url, write_metrics=True, timeout=30)
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            score = score_run(paths, ScoringPolicy(), agent_url=lambda name: url, write_metrics=True, timeout=30)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert score.groups[0].source == "local"
    assert score.groups[0].coverage.scored == rollouts
    assert score.groups[0].metrics["usage_summary"]["total_tokens"] == 42 * rollouts
    print(f"peak {(peak - before) / rollouts:.0f} B per rollout")
    assert (peak - before) / rollouts < 300
