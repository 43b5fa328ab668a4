"""What NeMo Gym's collector keeps (it reads replies with Python's ``json``), we keep: ``NaN`` and
infinities, written back as ``json.dumps`` writes them, and integers of any size, exact in the
request an agent gets and in every stored row. The metrics file is strict JSON: there a non-finite
number is null."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_rollouts.cli import main
from pytest_rollouts.store.jsonl import dumps, loads

from ..agents import Reply, ScriptedAgent
from ..helpers import Artifacts, run_rollouts, subprocess_run, tasks, write_rows

BIG = 123456789012345678901234567890  # beyond 64 bits: orjson reads it as a float
BELOW_INT64 = -9223372036854775809  # 19 digits, one past int64: orjson rounds it too


def test_the_codec_reads_and_writes_what_python_json_does() -> None:
    text = b'{"a":NaN,"b":[-Infinity,Infinity],"c":%d,"d":%d,"e":1e400,"f":0.1,"g":"\\u00e9"}' % (BIG, BELOW_INT64)
    value = loads(text)
    assert repr(value) == repr(json.loads(text))
    assert dumps(value) == json.dumps(json.loads(text), separators=(",", ":")).encode()
    common = orjson.dumps({"reward": 1.0, "usage": {"input_tokens": 3}, "id": 18446744073709551615})
    assert loads(common) == orjson.loads(common) and dumps(loads(common)) == common
    with pytest.raises(ValueError, match="line 1 column 2"):
        loads(b"{oops")


def _reply(row: dict[str, Any], seen: int) -> Reply:
    """Python's json.dumps of a reply: task 0's reward is NaN, task 2's logprob sum -Infinity."""
    task = row["_ng_task_index"]
    reward = float("nan") if task == 0 else float(task % 2)
    reply = {"reward": reward, "logprob_sum": float("-inf") if task == 2 else 1.5, "trace_id": BIG + task}
    return Reply(raw=json.dumps(reply).encode())


def test_nan_infinity_and_big_integers_in_replies_are_kept_and_scored_as_nemo_gym_does(
    pytester: pytest.Pytester,
) -> None:
    """A NaN is a missing value to NeMo Gym's metrics (pandas skips it): the rollout is stored but
    unscored. An infinity is a value: the mean it enters is infinite, its spread undefined."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent(_reply) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    outcomes = result.parseoutcomes()
    assert (outcomes["passed"], outcomes["no_reward"]) == (2, 1), "a NaN reward is no reward"
    files = Artifacts(pytester.path)
    assert not files.failures_path.exists() or files.failures == []
    lines = {json.loads(line)["_ng_task_index"]: line for line in files.out.read_bytes().splitlines()}
    assert b'"reward":NaN' in lines[0] and b'"logprob_sum":-Infinity' in lines[2]
    for task, line in lines.items():
        assert json.loads(line)["trace_id"] == BIG + task
    [group] = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    agent_metrics = group["agent_metrics"]
    assert (agent_metrics["mean/reward"], agent_metrics["min/reward"]) == (0.5, 0.0)
    assert (agent_metrics["mean/logprob_sum"], agent_metrics["max/logprob_sum"]) == (None, 1.5)
    assert agent_metrics["std/logprob_sum"] is None
    assert (group["coverage"]["scored"], group["coverage"]["unrewarded"]) == (2, 1)
    orjson.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_bytes())  # strict JSON


def test_big_integers_in_dataset_rows_reach_the_agent_exactly_retries_included(pytester: pytest.Pytester) -> None:
    rows = [{**row, "seed": BIG, "limits": {"low": BELOW_INT64}} for row in tasks(2)]
    (pytester.path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))

    def busy_once(row: dict[str, Any], seen: int) -> Reply:
        return Reply(status=503) if seen == 0 else Reply(json={"reward": 1.0})

    with ScriptedAgent(busy_once) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retry-backoff=0.01")
    result.assert_outcomes(passed=2)
    sent = [json.loads(body) for body in agent.bodies]
    # In-run retries are tries of one attempt: all four carry attempt 0 (no index).
    assert len(sent) == 4 and [r.get("_ng_attempt_index", 0) for r in sent] == [0, 0, 0, 0]
    assert all((r["seed"], r["limits"]["low"]) == (BIG, BELOW_INT64) for r in sent)
    materialized = Artifacts(pytester.path).materialized_path.read_bytes().splitlines()
    stored = [json.loads(line) for line in materialized]
    assert all((r["seed"], r["limits"]["low"]) == (BIG, BELOW_INT64) for r in stored)


def test_a_metrics_server_reply_with_nan_is_kept_and_a_nan_mean_reward_is_no_score(pytester: pytest.Pytester) -> None:
    """Its metrics are written as it sent them, a non-finite number as null (strict JSON); a NaN
    mean/reward passes no --rollouts-fail-under."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    reply = json.dumps({"key_metrics": {"mean/reward": float("nan")}, "agent_metrics": {"max/x": float("inf")}})
    with ScriptedAgent(aggregate=lambda body: Reply(raw=reply.encode())) as agent:
        result = subprocess_run(pytester.path, agent.url, "--rollouts-fail-under=0.5")
    assert result.returncode == 7, result.stdout + result.stderr
    assert "EVAL FAILED: no mean/reward in the metrics to compare with --rollouts-fail-under 0.5." in result.stdout
    text = (pytester.path / "out" / "r_aggregate_metrics.json").read_text()
    assert '"mean/reward":null' in text and '"max/x":null' in text
    assert orjson.loads(text)[0]["metrics_source"] == "server"
    # The report reads the metrics file as the run wrote it (orjson refused the NaN: exit 4).
    assert main(["report", str(pytester.path / "out" / "r.jsonl"), "-o", str(pytester.path / "r.html")]) == 0


def test_a_field_with_infinities_of_both_signs_has_no_mean_and_scoring_goes_on(pytester: pytest.Pytester) -> None:
    """statistics.fmean raised (-inf + inf in fsum) and the session ended in a traceback, with
    no metrics and no section. pandas' mean of them is NaN: the statistic is left out."""
    infinities = {0: float("inf"), 1: float("-inf"), 2: 1.0, 3: float("nan")}

    def signed(row: dict[str, Any], seen: int) -> Reply:
        task = row["_ng_task_index"]
        return Reply(raw=json.dumps({"reward": infinities[task], "logprob_sum": infinities[task]}).encode())

    write_rows(pytester.path / "data.jsonl", tasks(4))
    with ScriptedAgent(signed) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*= rollouts =*"])
    [group] = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    metrics = group["agent_metrics"]
    assert metrics["mean/logprob_sum"] is None and metrics["std/logprob_sum"] is None
    assert (metrics["min/logprob_sum"], metrics["max/logprob_sum"]) == (None, None)  # infinities, as null


HALF = "\ud83d"  # half an emoji: a lone surrogate, which Python's json reads and no UTF-8 text can hold


def _halves(row: dict[str, Any], seen: int) -> Reply:
    """Python's json.dumps of replies holding lone surrogates: in a text, a field's name, and (task 2)
    a failure class and its reason."""
    if row["_ng_task_index"] == 2:
        return Reply(raw=json.dumps({"_ng_failure_class": f"cut{HALF}", "failure_reason": f"at {HALF}"}).encode())
    return Reply(raw=json.dumps({"reward": 1.0, f"score{HALF}": 0.5, "answer": f"half {HALF} emoji"}).encode())


def test_a_lone_surrogate_the_run_accepts_every_later_command_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows and replies holding half an emoji were stored, and then no report could be made (the
    page's JSON refused it), `report` refused the metrics file the run wrote, the dispatcher died
    on its message about the failure, and `aggregate` crashed printing it. It is read as U+FFFD,
    the character a UTF-8 decoder puts for what it cannot read, once, where it is read."""
    rows = [{**row, "topic": f"t{HALF}" if i == 0 else "plain"} for i, row in enumerate(tasks(3))]
    rows[0]["responses_create_params"]["input"] = f"what is {HALF}?"
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    metrics = json.dumps({"key_metrics": {"mean/reward": 1.0}, "agent_metrics": {f"mean/x{HALF}": 1.0}})
    with ScriptedAgent(_halves, aggregate=lambda body: Reply(raw=metrics.encode())) as agent:
        result = subprocess_run(tmp_path, agent.url, "--rollouts-html=out/report.html", "--rollouts-group-by=topic")
        said = result.stdout + result.stderr
        assert result.returncode == 0 and "Traceback" not in said, said
        assert "cut\ufffd: at \ufffd" in result.stdout and "[topic=t\ufffd]" in result.stdout
        assert agent.requests[0]["responses_create_params"]["input"] == "what is \ufffd?"
        resumed = subprocess_run(tmp_path, agent.url, "--rollouts-resume")
        assert resumed.returncode == 0 and "Traceback" not in resumed.stdout + resumed.stderr
    assert (tmp_path / "out" / "report.html").is_file()
    out = Artifacts(tmp_path)
    assert [r["answer"] for r in out.rows] == ["half \ufffd emoji"] * 2
    assert [r["_ng_failure_class"] for r in out.failures] == ["cut\ufffd"] * 2
    run, merged = str(tmp_path / "out" / "r.jsonl"), str(tmp_path / "m" / "all.jsonl")
    for command in (
        ["report", run, "-o", str(tmp_path / "again.html")],
        ["compare", run, run],
        ["aggregate", "--input", run, "--out", merged],
    ):
        assert main(command) == 0, capsys.readouterr()
    assert "Traceback" not in capsys.readouterr().err


DEEP = b"[" * 5000 + b"]" * 5000  # deeper than Python's json recurses (orjson stops at 1024 levels)


def test_json_nested_too_deeply_is_bad_input_named_never_a_recursion_error(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dataset row, an agent's reply or a metrics file nested 5000 levels deep: orjson refused it
    and Python's json, tried next, raised RecursionError (a collection error with its traceback, a
    report that crashed)."""
    with pytest.raises(ValueError, match="depth limit exceeded"):
        loads(DEEP)
    with pytest.raises(ValueError, match="nested too deeply"):
        loads(b'{"seed": 12345678901234567890123, "a": ' + DEEP + b"}")  # a long number goes to json first
    (pytester.path / "deep.jsonl").write_bytes(b'{"a": ' + DEEP + b', "responses_create_params": {"input": "q"}}\n')
    result = run_rollouts(pytester, "deep.jsonl", "--rollouts-agent=http://127.0.0.1:9")
    assert "deep.jsonl:1: not valid JSON (depth limit exceeded" in result.stdout.str()
    assert "RecursionError" not in result.stdout.str() + result.stderr.str()
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent(lambda row, seen: Reply(raw=b'{"reward": 1.0, "trace": ' + DEEP + b"}")) as agent:
        result = subprocess_run(pytester.path, agent.url, "--rollouts-retries=0")
    assert "RecursionError" not in result.stdout + result.stderr
    failures = Artifacts(pytester.path).failures
    assert {row["_ng_failure_class"] for row in failures} == {"agent_run_error"}
    assert all("not valid JSON (depth limit exceeded" in row["_ng_failure_message"] for row in failures)
    metrics = pytester.path / "out" / "r_aggregate_metrics.json"
    metrics.write_bytes(DEEP)
    capsys.readouterr()
    assert main(["report", str(pytester.path / "out" / "r.jsonl"), "-o", str(pytester.path / "r.html")]) == 4
    assert "r_aggregate_metrics.json: not valid JSON (depth limit exceeded" in capsys.readouterr().err
