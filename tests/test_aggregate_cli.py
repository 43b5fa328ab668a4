"""``pytest-rollouts aggregate`` refuses bad options up front, like the run does, with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import write_rows
from .test_shards import aggregate

EXIT_USAGE = 4


@pytest.fixture
def gym_shards(tmp_path: Path) -> Path:
    """A working directory with two NeMo Gym shards (rs0, rs1: two tasks each) that merge cleanly,
    next to an earlier merged run, results/all.jsonl, whose files must survive a refused merge."""
    work = tmp_path / "work"
    for k in range(2):
        rows = [{"_ng_task_index": t, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}} for t in (2 * k, 2 * k + 1)]
        write_rows(work / f"rs{k}_materialized_inputs.jsonl", rows)
        write_rows(work / f"rs{k}.jsonl", [{**row, "reward": 1.0} for row in rows])
    for name in ("all.jsonl", "all_failures.jsonl", "all_materialized_inputs.jsonl"):
        write_rows(work / "results" / name, [{"earlier": name}])
    return work


def files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def refused(work: Path, *args: str) -> str:
    """Run the merge in ``work``; it must be a usage error that wrote nothing, even next to ``work``.
    Its stderr is returned."""
    before = files(work.parent)
    result = aggregate(work, *args)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "Traceback" not in result.stderr
    assert files(work.parent) == before, "nothing is written"
    return result.stderr


@pytest.mark.parametrize("out", ["results/", "", "results/all.txt"])
def test_an_out_not_named_stem_jsonl_is_a_usage_error(gym_shards: Path, out: str) -> None:
    """It used to crash (IsADirectoryError) leaving temp files, even above the working directory,
    or write sidecars named after the stem, over all.jsonl's."""
    stderr = refused(gym_shards, "--input", "rs*.jsonl", "--out", out)
    assert "--out: must name the output file, <stem>.jsonl" in stderr and repr(out) in stderr


def test_an_out_that_is_a_directory_is_a_usage_error(gym_shards: Path) -> None:
    (gym_shards / "merged.jsonl").mkdir()
    stderr = refused(gym_shards, "--input", "rs*.jsonl", "--out", "merged.jsonl")
    assert f"--out: {gym_shards / 'merged.jsonl'} is a directory; name the output file in it" in stderr
