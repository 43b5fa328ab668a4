"""A row of a run's files without its task or rollout index (an edit, another tool's file): resume,
``aggregate``, ``compare``, ``report`` and ``power`` name the file and line and exit with their
documented code (4; 8 for the merge's inputs that do not form one run). They ended in an
INTERNALERROR or a KeyError traceback (issue 32)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_rollouts.cli import main

from ..agents import Reply, ScriptedAgent
from ..helpers import aggregate, read_rows, run_rollouts, write_rows

STAMPS = "every row of a run names its rollout by _ng_task_index and _ng_rollout_index, whole numbers from 0"


def fail_row_one(row: dict[str, Any], seen: int) -> Reply:
    return Reply(status=500, json={}) if row["n"] == 1 else Reply(json={"reward": float(row["n"] % 2 == 0)})


@pytest.fixture
def run(pytester: pytest.Pytester) -> Path:
    """A real run of four tasks, task 1 failed: rows in all three of its files."""
    write_rows(pytester.path / "data.jsonl", [{"n": n, "responses_create_params": {"input": "q"}} for n in range(4)])
    with ScriptedAgent(fail_row_one) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retries=0")
    assert result.ret == 0, result.outlines[-20:]
    return pytester.path / "out"


def damage(path: Path, line: int, change: dict[str, Any], drop: str | None = None) -> None:
    rows = read_rows(path)
    rows[line - 1].update(change)
    if drop is not None:
        del rows[line - 1][drop]
    write_rows(path, rows)


DAMAGES = [
    pytest.param("r.jsonl", 2, {}, "_ng_task_index", "no _ng_task_index", id="output-without-task-index"),
    pytest.param("r.jsonl", 3, {"_ng_task_index": None}, None, "_ng_task_index is null", id="output-null"),
    pytest.param("r_failures.jsonl", 1, {"_ng_rollout_index": "0"}, None, '_ng_rollout_index is "0"', id="failure"),
    pytest.param("r_materialized_inputs.jsonl", 4, {"_ng_task_index": 1.5}, None, "_ng_task_index is 1.5", id="input"),
]


@pytest.mark.parametrize(("name", "line", "change", "drop", "said"), DAMAGES)
def test_a_row_without_its_stamps_is_named_by_every_command(
    pytester: pytest.Pytester,
    capsys: pytest.CaptureFixture[str],
    run: Path,
    name: str,
    line: int,
    change: dict[str, Any],
    drop: str | None,
    said: str,
) -> None:
    damage(run / name, line, change, drop)
    if name == "r_materialized_inputs.jsonl":  # else its manifest's digest refuses the edit first
        (run / "r_run_manifest.json").unlink()
    where = f"out/{name}:{line}: {said}; {STAMPS}"
    commands = [["report", "out/r.jsonl"]]
    if name != "r_failures.jsonl":  # compare and power read the rewards, not the failures
        commands += [["compare", "out/r.jsonl", "out/r.jsonl"], ["power", "out/r.jsonl"]]
    for command in commands:
        capsys.readouterr()
        assert main(command) == 4, command
        assert f"pytest-rollouts {command[0]}: {where}" in capsys.readouterr().err
    merged = aggregate(pytester.path, "--input=out/r.jsonl", "--out=m/r.jsonl")
    assert merged.returncode == 8, merged.stderr
    assert f"{pytester.path}/{where}" in merged.stderr and "Traceback" not in merged.stderr
    with ScriptedAgent(fail_row_one) as agent:
        resumed = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume")
        assert agent.requests == [], "a refused resume sends nothing"
    assert resumed.ret == 4
    assert f"cannot resume: {pytester.path}/{where}" in resumed.stderr.str()
    assert "INTERNALERROR" not in resumed.stdout.str() + resumed.stderr.str()


def test_true_is_no_index(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """JSON's ``true`` is not 1: ``int(True)`` would have read it as task 1."""
    damage(run / "r.jsonl", 1, {"_ng_task_index": True})
    assert main(["power", "out/r.jsonl"]) == 4
    assert f"out/r.jsonl:1: _ng_task_index is true; {STAMPS}" in capsys.readouterr().err
