"""No command writes over another run's files: a comparison's JSON, a report, a merge's output and a
run's output each refuse a path that is one of a run's files (exit 4), whichever run it is."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import run_rollouts

GOLDEN = Path(__file__).parent.parent / "interop" / "golden"


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Two finished runs (NeMo Gym's own files: no manifest of ours, materialized inputs beside them)."""
    shutil.copytree(GOLDEN / "agent", tmp_path / "k1")
    shutil.copytree(GOLDEN / "legacy", tmp_path / "k2")
    return tmp_path


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_rollouts", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize(
    "command",
    [
        ("compare", "k1/rollouts.jsonl", "k1/rollouts.jsonl", "--json", "k2/rollouts_failures.jsonl"),
        ("compare", "k1/rollouts.jsonl", "k1/rollouts.jsonl", "--json", "k2/rollouts.jsonl"),
        ("report", "k1/rollouts.jsonl", "-o", "k2/rollouts_materialized_inputs.jsonl"),
        ("report", "k1/rollouts.jsonl", "-o", "k2/rollouts.jsonl"),
        ("aggregate", "--input", "k1/rollouts.jsonl", "--out", "k2/rollouts_failures.jsonl"),
    ],
    ids=["compare-sidecar", "compare-results", "report-inputs", "report-results", "aggregate-sidecar"],
)
def test_a_command_refuses_to_write_over_another_runs_files(runs: Path, command: tuple[str, ...]) -> None:
    """Each exited 0 having replaced the run's file: its rows lost, and its resume, report and
    aggregate refused what was left."""
    before = snapshot(runs / "k2")
    done = cli(runs, *command)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "is one of the files of the run at k2/rollouts.jsonl" in done.stderr
    assert snapshot(runs / "k2") == before


def test_a_run_refuses_an_output_that_is_another_runs_file(pytester: pytest.Pytester) -> None:
    shutil.copytree(GOLDEN / "agent", pytester.path / "k1")
    shutil.copy(GOLDEN / "data.jsonl", pytester.path / "data.jsonl")
    before = snapshot(pytester.path / "k1")
    result = run_rollouts(
        pytester, "data.jsonl", "--rollouts-agent=http://127.0.0.1:9", out="k1/rollouts_materialized_inputs.jsonl"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*is one of the files of the run at k1/rollouts.jsonl*"])
    assert snapshot(pytester.path / "k1") == before
