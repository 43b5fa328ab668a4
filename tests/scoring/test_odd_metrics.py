"""A metrics server's odd reply, and a metrics file holding one: a named warning, never a traceback.

``/aggregate_metrics`` is a peer's word. A string where a number belongs, or a ``usage_summary``
without its usual keys, ended the run in a traceback (exit 1, no summary, no report), and the
``report`` command crashed the same way on the metrics file such a run wrote.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_rollouts import CollectionConfig, run
from pytest_rollouts.cli import main

from ..agents import Reply, ScriptedAgent
from ..helpers import run_rollouts, tasks, write_rows

METRICS = {"mean/reward": 1.0, "pass@1/reward": 1.0}


@pytest.mark.parametrize(
    ("reply", "named"),
    [
        ({"agent_metrics": METRICS, "key_metrics": {**METRICS, "pass@1/reward": "0.5"}}, "key_metrics pass@1/reward"),
        ({"agent_metrics": {**METRICS, "pass@1/reward": "0.5"}, "key_metrics": METRICS}, "agent_metrics pass@1/reward"),
        ({"agent_metrics": METRICS, "key_metrics": ["mean/reward", 1.0]}, "key_metrics"),
        ({"agent_metrics": METRICS, "key_metrics": METRICS, "usage_summary": {"num_turns": 3}}, "usage_summary"),
        ({"key_metrics": METRICS, "usage_summary": {"num_rollouts": 3, "total_tokens": "many"}}, "usage_summary"),
        ({"key_metrics": METRICS, "perf_summary": {"total_tokens_per_second": "fast"}}, "perf_summary"),
    ],
)
def test_an_odd_metrics_reply_is_named_and_the_runs_own_metrics_stand(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], reply: dict[str, Any], named: str
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent(aggregate=lambda body: reply) as agent:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-html=out/report.html"
        )
    said = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, said
    assert "Traceback" not in said
    # tasks(3): task 0 answered wrong, so the run's own mean is 2/3, not the server's 1.0.
    [line] = [line for line in result.stdout.lines if line.startswith("default: mean reward")]
    assert line.startswith("default: mean reward 0.6667 ± 0.3333 (se, tasks as clusters) over 3 rollouts"), line
    assert f"{agent.url}/aggregate_metrics replied with an odd {named}" in line and "computed locally" in line, line
    assert (pytester.path / "out" / "report.html").is_file()
    [entry] = orjson.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_bytes())
    assert entry["metrics_source"] == "local" and named in entry["metrics_note"]
    capsys.readouterr()
    assert main(["report", str(pytester.path / "out" / "r.jsonl"), "-o", str(pytester.path / "again.html")]) == 0


def test_a_metrics_reply_with_null_summaries_stands_and_the_run_writes_its_own(pytester: pytest.Pytester) -> None:
    """NeMo Gym 0.7.0's agents answer ``"perf_summary": null``: their whole reply was refused as odd
    ("perf_summary: None, not an object") and every such run's metrics were computed locally."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    reply = {"agent_metrics": METRICS, "key_metrics": METRICS, "usage_summary": None, "perf_summary": None}
    with ScriptedAgent(aggregate=lambda body: reply) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    [entry] = orjson.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_bytes())
    assert (entry["metrics_source"], entry["key_metrics"]) == ("server", METRICS), entry.get("metrics_note")
    assert entry["perf_summary"]["count"] == 3 and entry["usage_summary"]["num_rollouts"] == 3


def test_a_metrics_reply_cannot_rename_its_group(pytester: pytest.Pytester) -> None:
    """A server's reply that names an ``agent_ref`` (or an environment server) renamed its group in
    the metrics file: two entries for one agent, none for the other, and ``report`` printed them."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    reply = {"agent_ref": {"name": "someone"}, "_ng_environment_server": "elsewhere", "key_metrics": METRICS}
    with ScriptedAgent(aggregate=lambda body: reply) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    [entry] = orjson.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_bytes())
    assert entry["agent_ref"] == {"name": "default"} and "_ng_environment_server" not in entry
    assert entry["metrics_source"] == "server" and entry["key_metrics"] == METRICS


def test_an_infinite_mean_from_a_server_is_no_score_to_gate_on(pytester: pytest.Pytester) -> None:
    """``1e400`` reads as infinity: the run said ``mean reward inf`` and passed ``--rollouts-fail-under``."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    body = b'{"agent_metrics": {"mean/reward": 1e400}, "key_metrics": {"mean/reward": 1e400}}'
    with ScriptedAgent(aggregate=lambda _: Reply(raw=body)) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-fail-under=0.9")
    assert result.ret == 7, result.stdout.str() + result.stderr.str()
    assert "EVAL FAILED" in result.stdout.str()


def test_report_reads_a_metrics_file_holding_odd_values(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A metrics file that holds what an earlier version kept of such a reply: the report is made,
    the odd values left out and named."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent() as agent:
        assert run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}").ret == 0
    metrics = pytester.path / "out" / "r_aggregate_metrics.json"
    [entry] = orjson.loads(metrics.read_bytes())
    entry["key_metrics"]["pass@1/reward"] = "0.5"
    entry["usage_summary"] = {"num_turns": 3}
    metrics.write_bytes(orjson.dumps([entry]))
    capsys.readouterr()
    assert main(["report", str(pytester.path / "out" / "r.jsonl"), "-o", str(pytester.path / "report.html")]) == 0
    page = (pytester.path / "report.html").read_text()
    assert "left out of the metrics file" in page and "key_metrics pass@1/reward" in page
    assert "Traceback" not in capsys.readouterr().err


@pytest.fixture(scope="module")
def a_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain run of ``tasks(3)``, made once through the Python API: what the tests below hand-change
    is its metrics file, and what they check is ``report`` reading it (each on a copy)."""
    root = tmp_path_factory.mktemp("a_run")
    write_rows(root / "data.jsonl", tasks(3))
    with ScriptedAgent() as agent:
        run(
            CollectionConfig(
                input=str(root / "data.jsonl"), out=str(root / "out" / "r.jsonl"), agents={"default": agent.url}
            )
        )
    return root


@pytest.mark.parametrize(
    ("section", "change", "named"),
    [
        ("statistics", lambda e: "hand-written", "statistics: 'hand-written', not an object"),
        ("statistics", lambda e: {**e, "manski_bounds/reward": [0.5]}, "statistics manski_bounds/reward: [0.5]"),
        ("statistics", lambda e: {**e, "ci_95/reward": ["a", "b"]}, "statistics ci_95/reward: ['a', 'b']"),
        ("statistics", lambda e: {**e, "reward_range": [1]}, "statistics reward_range: [1], not two numbers"),
        ("statistics", lambda e: {**e, "by_dataset": {"d": "x"}}, "statistics by_dataset d: 'x', not an object"),
        ("coverage", lambda e: {**e, "failed_by_class": ["a"]}, "coverage failed_by_class: ['a'], not counts"),
        ("coverage", lambda e: {**e, "failed_by_class": {"a": "x"}}, "coverage failed_by_class: {'a': 'x'}"),
        ("coverage", lambda e: {**e, "missing_by_class": [1]}, "coverage missing_by_class: [1], not counts"),
        ("coverage", lambda e: {**e, "expected": "6"}, "coverage expected: '6', not a count"),
    ],
)
def test_report_leaves_out_a_run_written_section_a_hand_changed_and_names_it(
    a_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, change: Any, named: str
) -> None:
    """``statistics`` a string, an interval of one value, ``failed_by_class`` a list: tracebacks."""
    shutil.copytree(a_run, tmp_path, dirs_exist_ok=True)
    metrics = tmp_path / "out" / "r_aggregate_metrics.json"
    [entry] = orjson.loads(metrics.read_bytes())
    entry[section] = change(entry[section])
    metrics.write_bytes(orjson.dumps([entry]))
    capsys.readouterr()
    assert main(["report", str(tmp_path / "out" / "r.jsonl"), "-o", str(tmp_path / "report.html")]) == 0
    assert "Traceback" not in capsys.readouterr().err
    page = (tmp_path / "report.html").read_text()
    assert "left out of the metrics file" in page and named in page
    # The rest is reported: the mean and the coverage, rescored from the rows where the file's is odd.
    assert "3 of 3 rollouts scored" in page and "mean reward 0.6667" in page


def test_the_metrics_file_is_strict_json_and_report_reads_its_nulls(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server's NaN and infinities were written back bare (``NaN``, ``Infinity``: no JSON to jq,
    JavaScript or orjson); as null, ``report`` formatted them and crashed (a traceback)."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    body = (
        b'{"agent_metrics": {"mean/reward": NaN, "x": Infinity}, "key_metrics": {"mean/reward": 0.5, "y": -Infinity},'
        b' "usage_summary": {"num_rollouts": 3, "total_tokens": Infinity, "mean/total_tokens": NaN, "num_turns": NaN,'
        b' "mean/num_turns": Infinity}, "perf_summary": {"total_tokens_per_second": NaN}}'
    )
    with ScriptedAgent(aggregate=lambda _: Reply(raw=body)) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    written = (pytester.path / "out" / "r_aggregate_metrics.json").read_bytes()
    [entry] = orjson.loads(written)  # orjson takes strict JSON only
    assert entry["agent_metrics"] == {"mean/reward": None, "x": None}
    assert entry["key_metrics"] == {"mean/reward": 0.5, "y": None}
    assert entry["usage_summary"]["total_tokens"] is None and entry["perf_summary"]["total_tokens_per_second"] is None
    capsys.readouterr()
    assert main(["report", str(pytester.path / "out" / "r.jsonl"), "-o", str(pytester.path / "report.html")]) == 0
    assert "Traceback" not in capsys.readouterr().err
    page = (pytester.path / "report.html").read_text()
    assert "- tokens (0 in, 0 out; mean - per rollout), - turns (mean -), - tokens/s (0 out)" in page
    # The session says the same of the same values: no value, not nan or inf.
    assert "- tokens (0 in, 0 out; mean - per rollout), - turns (mean -), - tokens/s (0 out)" in result.stdout.str()
