"""``--report-log`` (pytest-reportlog) and ``--junitxml`` carry each item's rewards and failure classes
(``pytest/properties.py``), in one process and under ``-n 2``, so CI tools read them without our files."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import orjson
import pytest

from ..agents import Reply, ScriptedAgent
from ..helpers import pytest_command, run_rollouts, write_rows

# Task 0 is right twice, task 1 breaks twice (agent_run_error), task 2 is right once and masked once.
ITEMS = ("data.jsonl::task[0]", "data.jsonl::task[1]", "data.jsonl::task[2]")


def answers(row: dict[str, Any], seen: int) -> Reply:
    task, rollout = row["_ng_task_index"], row["_ng_rollout_index"]
    if task == 1:
        return Reply(status=500, raw=b"boom")
    if task == 2 and rollout == 1:
        return Reply(json={"reward": 0.0, "mask_sample": True})
    return Reply(json={"reward": 1.0})


def call_properties(log: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each item's call report in the report log: its outcome and its properties, as logged."""
    reports = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    calls = [r for r in reports if r.get("$report_type") == "TestReport" and r["when"] == "call"]
    return {r["nodeid"]: (r["outcome"], dict(r["user_properties"])) for r in calls}


def junit_properties(xml: Path) -> dict[str, dict[str, Any]]:
    """Each test case's properties in the junitxml file, read back from their JSON text."""
    cases = ElementTree.parse(xml).getroot().iter("testcase")
    return {
        f"{case.get('classname', '').replace('.', '/')}::{case.get('name')}": {
            prop.get("name"): orjson.loads(prop.get("value", "")) for prop in case.iter("property")
        }
        for case in cases
    }


def check(log: dict[str, tuple[str, dict[str, Any]]], junit: dict[str, dict[str, Any]] | None) -> None:
    assert sorted(log) == list(ITEMS), log
    passed, broken, masked = (log[item] for item in ITEMS)
    assert passed[0] == "passed" and passed[1]["rollouts_rewards"] == [1.0, 1.0]
    assert broken[0] == "failed"
    assert broken[1]["rollouts_rewards"] == [None, None]
    assert broken[1]["rollouts_failures"] == {"agent_run_error": 2}
    assert masked[0] == "passed"
    assert (masked[1]["rollouts_rewards"], masked[1]["rollouts_masked"]) == ([1.0, None], 1)
    if junit is None:
        return
    by_name = {name.rsplit("::", 1)[-1]: props for name, props in junit.items()}
    assert by_name["task[0]"]["rollouts_rewards"] == [1.0, 1.0]
    assert by_name["task[1]"]["rollouts_failures"] == {"agent_run_error": 2}
    assert by_name["task[1]"]["rollouts_rewards"] == [None, None]
    assert by_name["task[2]"]["rollouts_masked"] == 1


@pytest.mark.parametrize("junitxml", [True, False], ids=["with-junitxml", "report-log-only"])
def test_the_report_log_and_junitxml_carry_rewards_and_failure_classes(
    pytester: pytest.Pytester, junitxml: bool
) -> None:
    write_rows(pytester.path / "data.jsonl", [{"responses_create_params": {"input": f"q{i}"}} for i in range(3)])
    with ScriptedAgent(answers) as agent:
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={agent.url}",
            "--rollouts-repeats=2",
            "-p",
            "pytest_reportlog",
            "--report-log=log.jsonl",
            *(["--junitxml=junit.xml"] if junitxml else []),
        )
    assert (pytester.path / "log.jsonl").exists(), result.stdout.str()
    junit = junit_properties(pytester.path / "junit.xml") if junitxml else None
    check(call_properties(pytester.path / "log.jsonl"), junit)


def test_under_xdist_the_controllers_report_log_and_junitxml_carry_them(tmp_path: Path) -> None:
    write_rows(tmp_path / "data.jsonl", [{"responses_create_params": {"input": f"q{i}"}} for i in range(3)])
    with ScriptedAgent(answers) as agent:
        command = pytest_command(
            agent.url,
            "-n",
            "2",
            "--rollouts-repeats=2",
            "-p",
            "pytest_reportlog",
            "--report-log=log.jsonl",
            "--junitxml=junit.xml",
        )
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (tmp_path / "log.jsonl").exists(), done.stdout + done.stderr
    check(call_properties(tmp_path / "log.jsonl"), junit_properties(tmp_path / "junit.xml"))
