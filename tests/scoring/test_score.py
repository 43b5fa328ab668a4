"""An honest score: coverage against the whole input, explicit policies, metrics, and the CI gate."""

from __future__ import annotations

import fnmatch
import gzip
import json
import socket
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_rollouts.scoring.accounting import ROW_MASKED, ROW_READ, ScoringPolicy, account
from pytest_rollouts.scoring.aggregate import score_run
from pytest_rollouts.scoring.metrics import numeric_fields
from pytest_rollouts.scoring.output_scan import OutputScan
from pytest_rollouts.store.artifacts import ArtifactPaths
from pytest_rollouts.store.jsonl import JsonlError

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import Artifacts, keys, run_rollouts, subprocess_run, tasks, write_rows


def mixed(row: dict[str, Any], seen: int) -> Reply:
    """Task 0 scores 1 twice; task 1: rollout 0 breaks (500), rollout 1 scores 1;
    task 2: rollout 0 scores 0, rollout 1 is a failure written nowhere (no row at all)."""
    task, rollout = row["_ng_task_index"], row["_ng_rollout_index"]
    if (task, rollout) == (1, 0):
        return Reply(status=500, raw=b"boom")
    if (task, rollout) == (2, 1):
        return Reply(json={"_ng_failure_class": "judge_invalid", "_ng_no_persist": True})
    return Reply(json={"reward": 0.0 if task == 2 else 1.0, "response": {"usage": {"output_tokens": 10 * task}}})


def metrics_file(pytester: pytest.Pytester) -> list[dict[str, Any]]:
    return json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())


def test_policies_change_the_metric_input_and_never_the_artifacts(pytester: pytest.Pytester) -> None:
    # A dataset field named like the score: the policies' zeros must stay 0.0 all the same.
    write_rows(pytester.path / "data.jsonl", [{**task, "reward": 1.0} for task in tasks(3)])
    with ScriptedAgent(mixed) as agent:
        common = ("data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2")
        plain = run_rollouts(pytester, *common)
        plain.stdout.fnmatch_lines(
            [
                "default: mean reward 0.7500 ± * over 4 rollouts*[[]local metrics[]]",
                "Rollouts missing from the score: 2 of 6 materialized (agent_run_error 1, no row 1 routed this run; "
                "see out/r_failures.jsonl)",
                "Metrics cover: 4 of 6 rollouts",
            ]
        )
        [entry] = metrics_file(pytester)
        assert entry["key_metrics"]["mean/reward"] == 0.75
        assert entry["coverage"] == {
            "expected": 6,
            "completed": 4,
            "scored": 4,
            "missing": 2,
            "masked": 0,
            "unrewarded": 0,
            "counted_as_zero": 0,
            "imputed_zero": 0,
            "missing_by_class": {"agent_run_error": 1, "no row": 1},
            "failed": 1,
            "failed_by_class": {"agent_run_error": 1},
        }
        artifacts = {p.name: p.read_bytes() for p in (pytester.path / "out").glob("r*.jsonl")}
        agent.requests.clear()
        counted = run_rollouts(
            pytester,
            *common,
            "--rollouts-resume",
            "--rollouts-max-attempts=1",
            "--rollouts-count-as-zero=agent_run_error",
        )
        counted.stdout.fnmatch_lines(["default: mean reward 0.6000*over 5 rollouts*", "Metrics cover: 5 of 6 rollouts"])
        assert metrics_file(pytester)[0]["key_metrics"]["mean/reward"] == 0.6
        both = run_rollouts(
            pytester,
            *common,
            "--rollouts-resume",
            "--rollouts-max-attempts=1",
            "--rollouts-count-as-zero=agent_run_error",
            "--rollouts-count-missing-as-zero",
        )
        both.stdout.fnmatch_lines(
            [
                "default: mean reward 0.5000*over 6 rollouts*",
                "Metrics cover: 6 of 6 rollouts",
                "Scored as zero because they left no row: 1 of 6 rollouts",
            ]
        )
        assert metrics_file(pytester)[0]["coverage"]["imputed_zero"] == 1
        assert [r["_ng_task_index"] for r in agent.requests] == [2, 2], "only the no-row key is re-sent"
    assert {p.name: p.read_bytes() for p in (pytester.path / "out").glob("r*.jsonl")} == artifacts


def test_a_counted_failure_that_carries_a_reward_counts_as_it_stands(pytester: pytest.Pytester) -> None:
    """NeMo Gym's rule; only a failure row without one is a zero (and never the dataset's field)."""
    write_rows(pytester.path / "data.jsonl", [{**task, "reward": 1.0} for task in tasks(3)])

    def judged(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] == 1:
            return Reply(json={"_ng_failure_class": "judge_error", "reward": 0.25})
        if row["_ng_task_index"] == 2:
            return Reply(json={"_ng_failure_class": "judge_error"})
        return Reply(json={"reward": 1.0})

    with ScriptedAgent(judged) as agent:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-count-as-zero=judge_error"
        )
    result.stdout.fnmatch_lines(["default: mean reward 0.4167*over 3 rollouts*"])
    assert metrics_file(pytester)[0]["key_metrics"]["mean/reward"] == pytest.approx((1.0 + 0.25 + 0.0) / 3)


def test_results_without_a_numeric_reward_are_kept_but_not_counted_as_scored(pytester: pytest.Pytester) -> None:
    """They read "10 of 10 rollouts scored" while the mean covered the 5 with a reward."""
    write_rows(pytester.path / "data.jsonl", tasks(10))

    def odd_tasks_unscored(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] % 2:
            return Reply(json={"reward": None if row["_ng_task_index"] == 1 else "high", "response": {}})
        return Reply(json={"reward": 1.0})

    with ScriptedAgent(odd_tasks_unscored) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    result.stdout.fnmatch_lines(
        [
            "5 of 10 rollouts scored; no_reward 5",
            "default: mean reward 1.0000*over 5 rollouts*",
            "Rollouts missing from the score: 5 of 10 materialized (no_reward 5 routed this run; "
            "no_reward kept in out/r.jsonl)",
            "Metrics cover: 5 of 10 rollouts",
        ]
    )
    coverage = metrics_file(pytester)[0]["coverage"]
    assert (coverage["completed"], coverage["unrewarded"], coverage["scored"]) == (10, 5, 5)
    assert len(Artifacts(pytester.path).rows) == 10, "the rows are kept"


def echoes_difficulty(row: dict[str, Any], seen: int) -> Reply:
    """Like ``mixed``, scoring 1 and echoing the dataset's ``difficulty`` (never its ``w``)."""
    if (row["_ng_task_index"], row["_ng_rollout_index"]) in ((1, 0), (2, 1)):
        return mixed(row, seen)
    return Reply(json={"reward": 1.0, "difficulty": row["difficulty"], "response": {"usage": {"output_tokens": 4}}})


def test_added_zeros_get_only_the_task_fields_real_rows_carry(pytester: pytest.Pytester) -> None:
    """Both kinds of added zero, a counted failure and an imputed one, get their task's dataset
    fields, but only those real rows of the group carry: ``w``, which the agent never echoes, would
    otherwise be a metric of its own (``mean/w`` 3.0, from the zeros alone)."""
    write_rows(pytester.path / "data.jsonl", [{**task, "difficulty": i, "w": 3} for i, task in enumerate(tasks(3))])
    with ScriptedAgent(echoes_difficulty, aggregate=lambda body: {"agent_metrics": {"mean/reward": 0.5}}) as agent:
        run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={agent.url}",
            "--rollouts-repeats=2",
            "--rollouts-max-attempts=1",
            "--rollouts-count-as-zero=agent_run_error",
            "--rollouts-count-missing-as-zero",
        ).stdout.fnmatch_lines(["*Metrics cover: 6 of 6 rollouts"])
        [body] = agent.aggregate_bodies
    sent = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in body["verify_responses"]}
    counted, imputed = sent[1, 0], sent[2, 1]
    assert counted["_ng_failure_class"] == "agent_run_error" and "_ng_failure_class" not in imputed
    assert (counted["difficulty"], imputed["difficulty"]) == (1, 2)
    assert "w" not in counted and "w" not in imputed
    assert imputed == {
        "_ng_task_index": 2,
        "_ng_rollout_index": 1,
        "agent_ref": {"name": "default"},
        "difficulty": 2,
        "reward": 0.0,
    }
    paths = ArtifactPaths(pytester.path / "out" / "r.jsonl")
    policy = ScoringPolicy(frozenset({"agent_run_error"}), count_missing_as_zero=True)
    [local] = score_run(paths, policy, agent_url=lambda name: None, write_metrics=True, timeout=10).groups
    assert local.source == "local" and local.coverage.scored == 6
    assert not [name for name in local.metrics["agent_metrics"] if name.endswith("/w")]
    assert local.metrics["agent_metrics"]["mean/difficulty"] == 1.0, "every rollout, the zeros too, has its task's"
    assert local.metrics["agent_metrics"]["mean/reward"] == pytest.approx(4 / 6)


def test_local_group_entries_list_their_rollouts_and_sample_the_task(pytester: pytest.Pytester) -> None:
    """Without a metrics server each task's entry still has NeMo Gym's ``rollout_infos`` (each rollout
    of the metric input, a counted zero too, by the indices of its row in the files, where a
    fanned-out agent's continue another's) and ``sample`` (the task's materialized row, indices off)."""
    write_rows(pytester.path / "data.jsonl", tasks(2))

    def b_breaks_once(row: dict[str, Any], seen: int) -> Reply:
        broken = (row["agent_ref"]["name"], row["_ng_task_index"], row["_ng_rollout_index"]) == ("b", 1, 3)
        return Reply(status=500, raw=b"boom") if broken else verifier(row, seen)

    with ScriptedAgent(b_breaks_once) as agent:
        run_rollouts(
            pytester,
            "data.jsonl",
            *(f"--rollouts-agent={name}{agent.url}" for name in ("", "a=", "b=")),
            "--rollouts-fan-out=_default=a,b",
            "--rollouts-repeats=2",
            "--rollouts-max-attempts=1",
            "--rollouts-count-as-zero=agent_run_error",
        )
    artifacts = Artifacts(pytester.path)
    entries = {entry["agent_ref"]["name"]: entry for entry in metrics_file(pytester)}
    assert set(entries) == {"a", "b"} and {e["metrics_source"] for e in entries.values()} == {"local"}
    b_task1 = entries["b"]["group_level_metrics"][1]
    usage = {"input_tokens": 3.0, "output_tokens": 5.0, "total_tokens": 8.0}
    assert b_task1["rollout_infos"] == [
        {"rollout_id": "1:2", "_ng_task_index": 1, "_ng_rollout_index": 2, "reward": 1.0, **usage},
        {"rollout_id": "1:3", "_ng_task_index": 1, "_ng_rollout_index": 3, "reward": 0.0},  # the counted failure
    ]
    assert [r["_ng_rollout_index"] for r in entries["b"]["repeat_level_metrics"]] == [0, 1], "repeats, not indices"
    for name, entry in entries.items():
        materialized = [r for r in artifacts.materialized if r["agent_ref"]["name"] == name]
        rewards = {key: row["reward"] for key, row in zip(keys(artifacts.rows), artifacts.rows, strict=True)}
        for group in entry["group_level_metrics"]:
            task = group["_ng_task_index"]
            mine = sorted(
                (r for r in materialized if r["_ng_task_index"] == task), key=lambda r: r["_ng_rollout_index"]
            )
            infos = group["rollout_infos"]
            assert [(i["_ng_task_index"], i["_ng_rollout_index"]) for i in infos] == keys(mine)
            assert [i["rollout_id"] for i in infos] == [f"{t}:{r}" for t, r in keys(mine)]
            assert [i["reward"] for i in infos] == [rewards.get(key, 0.0) for key in keys(mine)]
            indices = ("_ng_task_index", "_ng_rollout_index")
            assert group["sample"] == {k: v for k, v in mine[0].items() if k not in indices}
            assert group["sample"]["agent_ref"] == {"name": name}


def test_account_latest_attempt_decides_and_success_wins() -> None:
    expected = [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 0)]
    completed = {(0, 0), (1, 0), (5, 0)}
    latest = {(1, 0): "agent_run_error", (2, 0): "agent_run_error", (3, 0): "agent_request_failed"}
    policy = ScoringPolicy(frozenset({"agent_run_error"}), count_missing_as_zero=True)
    states = [(key, (ROW_READ | (ROW_MASKED if key == (5, 0) else 0)) if key in completed else 0) for key in expected]
    result = account(states, latest, policy)
    assert result.counted == [(2, 0)], "(1, 0) also succeeded; (3, 0)'s latest class is not listed"
    assert result.imputed == [(4, 0)]
    coverage = result.coverage
    assert (coverage.expected, coverage.completed, coverage.scored, coverage.missing) == (6, 3, 4, 2)
    assert dict(coverage.missing_by_class) == {"agent_request_failed": 1, "mask_sample": 1}


@pytest.mark.parametrize(
    ("reply", "line", "gate"),
    [
        (
            {"agent_metrics": {"mean/reward": 0.5}},
            "default: mean reward 0.5000 over 3 rollouts [[]server metrics[]]",
            "EVAL FAILED: mean reward 0.5000 is below --rollouts-fail-under 0.9.",
        ),
        (
            {"agent_metrics": {"accuracy": 0.5}},
            "default: its metrics hold no mean/reward (3 rollouts scored) [[]server metrics[]]",
            "EVAL FAILED: no mean/reward in the metrics to compare with --rollouts-fail-under 0.9.",
        ),
    ],
)
def test_server_metrics_without_key_metrics_still_report_and_gate(
    pytester: pytest.Pytester, reply: dict, line: str, gate: str
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent(aggregate=lambda body: reply) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-fail-under=0.9")
    said = result.stdout.str()
    assert result.ret == 7, said + result.stderr.str()
    assert fnmatch.fnmatch(said, f"*{line}*") and gate in said


def test_server_metrics_get_sorted_stripped_rows(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    reply = {
        "agent_metrics": {"mean/reward": 0.25},
        "key_metrics": {"mean/reward": 0.25},
        "group_level_metrics": [],
        "repeat_level_metrics": [],
    }
    with ScriptedAgent(mixed, aggregate=lambda body: reply, latency=0.0) as agent:
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={agent.url}",
            "--rollouts-repeats=2",
            "--rollouts-parallel=1",
            "--rollouts-count-as-zero=agent_run_error",
        )
        result.stdout.fnmatch_lines(["default: mean reward 0.2500 over 5 rollouts [[]server metrics[]]"])
        [body] = agent.aggregate_bodies
    rows = body["verify_responses"]
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    assert all("responses_create_params" not in r for r in rows)
    assert rows[0]["response"] == {"usage": {"output_tokens": 0}}
    counted = rows[2]
    assert counted["reward"] == 0.0 and counted["_ng_failure_class"] == "agent_run_error"
    [entry] = metrics_file(pytester)
    assert entry["metrics_source"] == "server" and entry["agent_metrics"] == reply["agent_metrics"]
    assert entry["agent_ref"] == {"name": "default"} and entry["coverage"]["scored"] == 5


def test_server_without_aggregate_metrics_falls_back_to_local(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    [entry] = metrics_file(pytester)
    assert entry["metrics_source"] == "local"
    assert entry["key_metrics"]["mean/reward"] == pytest.approx(2 / 3)
    assert [g["_ng_task_index"] for g in entry["group_level_metrics"]] == [0, 1, 2]


def test_a_compressed_metrics_reply_is_read_as_a_run_reply_is(pytester: pytest.Pytester) -> None:
    """``/aggregate_metrics`` goes through the one client to agents, which decodes gzip as it does
    for ``/run`` (``http.client`` handed the compressed bytes on: the server's metrics were dropped)."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    body = gzip.compress(orjson.dumps({"agent_metrics": {"mean/reward": 0.25}, "key_metrics": {"mean/reward": 0.25}}))
    head = f"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    with ScriptedAgent(aggregate=lambda _: Reply(reset=True, raw=head + body)) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    result.stdout.fnmatch_lines(["default: mean reward 0.2500 over 3 rollouts [[]server metrics[]]"])
    [entry] = metrics_file(pytester)
    assert (entry["metrics_source"], entry["key_metrics"]) == ("server", {"mean/reward": 0.25})


def test_a_metrics_server_answering_garbage_falls_back_to_local(pytester: pytest.Pytester) -> None:
    """Not even HTTP (http.client raised BadStatusLine, no OSError): the session died with a traceback."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent(aggregate=lambda body: Reply(reset=True, raw=b"garbage\r\n\r\n")) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    result.assert_outcomes(passed=3)
    [entry] = metrics_file(pytester)
    assert entry["metrics_source"] == "local"
    assert "/aggregate_metrics failed: " in entry["metrics_note"]


def test_all_failed_run_says_so(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent(lambda row, seen: Reply(status=500)) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    result.stdout.fnmatch_lines(["None of the 3 materialized rollouts produced a result (agent_run_error 3; see *)"])
    result.stdout.no_fnmatch_line("*mean reward*")


def test_require_complete_and_fail_under_exit_codes(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))

    def one_breaks(row: dict[str, Any], seen: int) -> Reply:
        return Reply(status=500) if row["_ng_task_index"] == 1 else verifier(row, seen)

    with ScriptedAgent(one_breaks) as agent:
        # The process's own exit status once; the other gates in-process, where pytest returns the same.
        incomplete = subprocess_run(pytester.path, agent.url, "--rollouts-require-complete")
        assert incomplete.returncode == 6, incomplete.stdout
        assert "EVAL FAILED: 2/3 samples completed. Partial artifacts retained at " in incomplete.stdout
        assert (pytester.path / "out" / "r_aggregate_metrics.json").exists(), "artifacts written before the gate"
        low = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-fail-under=0.6")
        assert low.ret == 7, low.stdout.str()
        assert "EVAL FAILED: mean reward 0.5000 is below --rollouts-fail-under 0.6." in low.stdout.str()
        assert (
            run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-fail-under=0.5").ret == 0
        )
    with ScriptedAgent() as agent:
        assert (
            run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-require-complete").ret
            == 0
        )


def test_no_aggregate_skips_metrics_but_keeps_the_gate(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    result = run_rollouts(
        pytester,
        "data.jsonl",
        f"--rollouts-agent={agent.url}",
        "--rollouts-no-aggregate",
        "--rollouts-require-complete",
    )
    assert result.ret == 0
    assert not (pytester.path / "out" / "r_aggregate_metrics.json").exists()
    result.stdout.fnmatch_lines(["mean reward 0.5000 over 2 rollouts reported this session"])


class AnswersAtOnce:
    """A server that replies 404 as soon as it has a request's headers, then only counts what else arrives.

    Raw sockets, because what is measured is how much of the body the client still sends
    after the reply, which an HTTP framework would read (or refuse) on its own terms.
    """

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.body_bytes = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            received = b""
            while b"\r\n\r\n" not in received:
                received += conn.recv(65536)
            self.body_bytes = len(received.split(b"\r\n\r\n", 1)[1])
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            conn.settimeout(5)
            while data := conn.recv(65536):
                self.body_bytes += len(data)

    def close(self) -> None:
        self._thread.join(timeout=10)
        self._listener.close()


def test_metrics_body_stops_once_the_server_has_answered(tmp_path: Path) -> None:
    """A server without /aggregate_metrics answers 404 at once; the big body is not sent."""
    out = tmp_path / "r.jsonl"
    paths = ArtifactPaths(out)
    rows = 3000
    with open(paths.materialized, "wb") as materialized, open(out, "wb") as outputs:
        for task in range(rows):
            stamps = {"agent_ref": {"name": "a"}, "_ng_task_index": task, "_ng_rollout_index": 0}
            materialized.write(orjson.dumps({"question": task, **stamps}) + b"\n")
            # Top-level fields are sent as they are: about 3 MB of body in all.
            outputs.write(orjson.dumps({"reward": 1.0, "transcript": "x" * 1000, **stamps}) + b"\n")
    paths.failures.touch()
    server = AnswersAtOnce()
    try:
        score = score_run(paths, ScoringPolicy(), agent_url=lambda name: server.url, write_metrics=True, timeout=10)
    finally:
        server.close()
    [group] = score.groups
    assert group.source == "local" and group.mean_reward == 1.0
    # Told to expect a body, the server refused it from the head: none of it was sent.
    assert server.body_bytes == 0, server.body_bytes


def test_session_scores_against_the_same_rows_the_files_hold(pytester: pytest.Pytester) -> None:
    """The dispatching session counts against the materialized rows it holds (written, or read on
    resume) instead of reading them again; scoring from the files alone must agree, group by group."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    paths = ArtifactPaths(pytester.path / "out" / "r.jsonl")
    with ScriptedAgent(mixed) as agent:
        agents = [f"--rollouts-agent={name}{agent.url}" for name in ("", "a=", "b=")]
        args = ("data.jsonl", *agents, "--rollouts-repeats=2", "--rollouts-fan-out=_default=a,b")
        for extra in ((), ("--rollouts-resume",)):
            run_rollouts(pytester, *args, *extra)
            session = {e["agent_ref"]["name"]: e["coverage"] for e in metrics_file(pytester)}
            from_files = score_run(paths, ScoringPolicy(), agent_url=lambda name: None, write_metrics=False, timeout=10)
            assert {g.agent: g.coverage.as_dict() for g in from_files.groups} == session
            assert set(session) == {"a", "b"}


def _scan_state(scan: OutputScan) -> dict[str, Any]:
    return {
        name: (
            list(g.states()),
            [(r.task(i), r.rollout(i), r.values(i)) for i in range(len(r))],
            list(g.metric_order()[0]),
            g.fields,
        )
        for name, g in scan.groups.items()
        for r in [g.rollouts()]
    }


def test_output_scan_read_as_the_file_grows_equals_one_read(tmp_path: Path) -> None:
    """Read in small pieces while rows are still being appended (a piece boundary inside a line,
    a line longer than a piece, a line half-written), the tallies equal one read of the whole file."""
    paths = ArtifactPaths(tmp_path / "r.jsonl")
    stamps = [
        {"agent_ref": {"name": "a" if task % 2 else "b"}, "_ng_task_index": task, "_ng_rollout_index": 0}
        for task in range(40)
    ]
    paths.materialized.write_bytes(b"".join(orjson.dumps({"q": s["_ng_task_index"], **s}) + b"\n" for s in stamps))
    lines = [
        orjson.dumps(
            {"reward": s["_ng_task_index"] % 3 / 2, "pad": "x" * (300 if s["_ng_task_index"] == 7 else 5), **s}
        )
        + b"\n"
        for s in stamps
    ]
    lines[5] = orjson.dumps({"mask_sample": True, **stamps[5]}) + b"\n"
    lines.insert(9, b"\n")  # a blank line: skipped, still counted for line numbers
    lines.insert(12, lines[11])  # a duplicate: the first row wins
    data = b"".join(lines)
    growing = OutputScan.of_files(paths)
    for cut in (0, 150, 151, 1000, 1400, len(data) - 7):  # the last cut leaves a half-written line
        paths.out.write_bytes(data[:cut])
        while growing.advance(64):
            pass
        whole_lines = ArtifactPaths(tmp_path / "so_far" / "r.jsonl")
        whole_lines.out.parent.mkdir(exist_ok=True)
        whole_lines.materialized.write_bytes(paths.materialized.read_bytes())
        whole_lines.out.write_bytes(data[: data.rfind(b"\n", 0, cut) + 1])
        so_far = OutputScan.of_files(whole_lines)
        so_far.advance()
        assert _scan_state(growing) == _scan_state(so_far), cut
    paths.out.write_bytes(data)
    growing.advance()
    whole = OutputScan.of_files(paths)
    whole.advance()
    assert _scan_state(growing) == _scan_state(whole)
    assert sum(1 for g in whole.groups.values() for _, state in g.states() if state) == 40
    assert {key for key, state in whole.groups["a"].states() if state & ROW_MASKED} == {(5, 0)}
    # Worked out from the rows themselves: each agent's unmasked tasks in file order, with rewards.
    for name in ("a", "b"):
        wanted = [(t, t % 3 / 2) for t in range(40) if (t % 2 == 1) == (name == "a") and t != 5]
        rows = whole.groups[name].rollouts()
        assert [(rows.task(i), rows.values(i)["reward"]) for i in range(len(rows))] == wanted


def test_output_scan_names_the_file_and_line_of_a_bad_row(tmp_path: Path) -> None:
    paths = ArtifactPaths(tmp_path / "r.jsonl")
    paths.materialized.write_bytes(
        orjson.dumps({"agent_ref": {"name": "a"}, "_ng_task_index": 0, "_ng_rollout_index": 0}) + b"\n"
    )
    paths.out.write_bytes(
        b"\n" + orjson.dumps({"reward": 1.0, "_ng_task_index": 0, "_ng_rollout_index": 0}) + b"\n[1]\n"
    )
    scan = OutputScan.of_files(paths)
    with pytest.raises(JsonlError, match=r"r\.jsonl:3: expected a JSON object"):
        scan.advance()


def test_a_scan_broken_off_starts_over_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-ahead interrupted inside a row (a signal, a bad line) may leave half a row in the
    tallies; the restarted scan counts every row once and names a bad line by its own number."""
    paths = ArtifactPaths(tmp_path / "r.jsonl")
    stamps = [{"agent_ref": {"name": "a"}, "_ng_task_index": task, "_ng_rollout_index": 0} for task in range(4)]
    paths.materialized.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in stamps))
    paths.out.write_bytes(b"".join(orjson.dumps({"reward": 1.0, **s}) + b"\n" for s in stamps))
    calls = []

    def interrupted(row: dict[str, Any]) -> dict[str, float]:
        calls.append(row)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return numeric_fields(row)

    monkeypatch.setattr("pytest_rollouts.scoring.output_scan.numeric_fields", interrupted)
    broken = OutputScan.of_files(paths)
    with pytest.raises(KeyboardInterrupt):
        broken.advance()
    monkeypatch.undo()
    restarted = broken.restarted()
    restarted.advance()
    whole = OutputScan.of_files(paths)
    whole.advance()
    assert _scan_state(restarted) == _scan_state(whole)
    assert len(whole.groups["a"].rollouts()) == 4

    with open(paths.out, "ab") as out:
        out.write(b"[1]\n")
    with pytest.raises(JsonlError, match=r"r\.jsonl:5: expected a JSON object"):
        whole.advance(8)
    with pytest.raises(JsonlError, match=r"r\.jsonl:5: expected a JSON object"):
        whole.restarted().advance()


@pytest.mark.parametrize("then", ["removed", "replaced"])
def test_a_scan_of_an_output_removed_or_replaced_mid_run_scores_what_the_path_holds(tmp_path: Path, then: str) -> None:
    """The read-ahead scan kept offsets into the file it read; once that file was removed (or another
    put in its place) while the run wrote it, scoring read rows by those offsets from a file no
    longer there and ended in INTERNALERROR (FileNotFoundError) when a server was asked for metrics."""
    paths = ArtifactPaths(tmp_path / "r.jsonl")
    stamps = [{"agent_ref": {"name": "a"}, "_ng_task_index": task, "_ng_rollout_index": 0} for task in range(4)]
    paths.materialized.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in stamps))
    paths.out.write_bytes(b"".join(orjson.dumps({"reward": 1.0, **s}) + b"\n" for s in stamps[:3]))
    read_ahead = OutputScan.of_files(paths)
    read_ahead.advance(1 << 16)
    with open(paths.out, "ab"):  # as the dispatcher holds it while the run writes
        paths.out.unlink()
        if then == "replaced":
            paths.out.write_bytes(orjson.dumps({"reward": 0.0, **stamps[3]}) + b"\n")
    asked: list[str] = []
    with ScriptedAgent(aggregate=lambda body: asked.append("asked") or {"key_metrics": {"mean/reward": 0.25}}) as agent:
        score = score_run(
            paths, ScoringPolicy(), agent_url=lambda name: agent.url, write_metrics=True, timeout=10, outputs=read_ahead
        )
    assert score.coverage.completed == (1 if then == "replaced" else 0)
    assert asked and score.groups[0].source == "server"


def test_an_output_removed_just_after_the_scan_read_it_is_still_noticed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's identity was taken after the read: removed in between, the scan had rows and no
    identity, and scoring read them by offset from a path with no file (seen under load)."""
    from pytest_rollouts.scoring import output_scan

    paths = ArtifactPaths(tmp_path / "r.jsonl")
    stamps = [{"agent_ref": {"name": "a"}, "_ng_task_index": task, "_ng_rollout_index": 0} for task in range(2)]
    paths.materialized.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in stamps))
    paths.out.write_bytes(b"".join(orjson.dumps({"reward": 1.0, **s}) + b"\n" for s in stamps))
    read = output_scan.whole_lines

    def read_then_removed(path: Path, offset: int, budget: int = -1) -> bytes:
        data = read(path, offset, budget)
        path.unlink(missing_ok=True)
        return data

    read_ahead = OutputScan.of_files(paths)
    with monkeypatch.context() as patch:
        patch.setattr(output_scan, "whole_lines", read_then_removed)
        read_ahead.advance(1 << 16)
    with ScriptedAgent(aggregate=lambda body: {"key_metrics": {"mean/reward": 1.0}}) as agent:
        score = score_run(
            paths, ScoringPolicy(), agent_url=lambda name: agent.url, write_metrics=True, timeout=10, outputs=read_ahead
        )
    assert score.coverage.completed == 0


def test_a_masked_rollout_is_not_unknown_to_the_statistics(tmp_path: Path) -> None:
    """Manski's bounds widen over rollouts without a score; a masked one was dropped on purpose."""
    paths = ArtifactPaths(tmp_path / "r.jsonl")
    stamps = [{"agent_ref": {"name": "a"}, "_ng_task_index": task, "_ng_rollout_index": 0} for task in range(3)]
    paths.materialized.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in stamps))
    rows = [{"reward": 1.0, **stamps[0]}, {"mask_sample": True, **stamps[1]}]  # task 2: no row at all
    paths.out.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    score = score_run(paths, ScoringPolicy(), agent_url=lambda name: None, write_metrics=True, timeout=10)
    entry = score.groups[0].metrics["statistics"]
    assert (entry["num_rollouts_scored"], entry["num_rollouts_unknown"]) == (1, 1)
