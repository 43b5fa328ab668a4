"""Resume after a crash: nothing lost, nothing run twice, nothing overwritten by accident."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytest_rollouts.rows.resume import KeyHistory, Verdict, decide

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import Artifacts, keys, pytest_command, read_rows, run_rollouts, tasks, write_rows


def persisted_keys(out: Path) -> list[tuple[int, int]]:
    """Keys whose line is whole on disk (a SIGKILL can leave the last one cut short)."""
    data = out.read_bytes() if out.exists() else b""
    whole = data[: data.rfind(b"\n") + 1]
    path = out.with_name("whole.jsonl")
    path.write_bytes(whole)
    return keys(read_rows(path))


@pytest.mark.parametrize("kill_after", [3, 40, 100])
def test_sigkill_then_resume_loses_and_duplicates_nothing(pytester: pytest.Pytester, kill_after: int) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(60))
    out = pytester.path / "out" / "r.jsonl"
    with ScriptedAgent(latency=0.02) as agent:
        proc = subprocess.Popen(
            pytest_command(agent.url, "--rollouts-repeats=2", "--rollouts-parallel=8"),
            cwd=pytester.path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while (not out.exists() or out.read_bytes().count(b"\n") < kill_after) and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        at_kill = persisted_keys(out)
        assert kill_after <= len(at_kill) < 120
        result = subprocess.run(
            pytest_command(agent.url, "--rollouts-repeats=2", "--rollouts-parallel=8", "--rollouts-resume"),
            cwd=pytester.path,
            capture_output=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout.decode()
        sent = Counter(agent.keys())
    artifacts = Artifacts(pytester.path)
    final = keys(artifacts.rows)
    assert sorted(final) == sorted(keys(artifacts.materialized)) and len(final) == 120
    assert len(set(final)) == len(final), "every key exactly once"
    assert all(sent[key] == 1 for key in at_kill), "persisted keys were never sent again"
    twice = [key for key, count in sent.items() if count > 1]
    assert len(twice) <= 8 and not set(twice) & set(at_kill), "only keys in flight at the kill ran twice"


def flaky_classes(row: dict[str, Any], seen: int) -> Reply:
    task = row["_ng_task_index"]
    if task == 0:
        return Reply(json={"_ng_failure_class": "timeout_exceeded", "_ng_failure_terminal": True})
    if task == 1:
        return Reply(status=503)
    if task == 2:
        return Reply(json={"_ng_failure_class": "skipped"})
    if task == 3 and seen == 0:
        return Reply(status=500)
    return verifier(row, seen)


def test_terminal_failures_are_not_resent(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(5))
    with ScriptedAgent(flaky_classes) as agent:
        first = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retry-backoff=0.01")
        first.stdout.fnmatch_lines(["*1 passed*"])
        assert Counter(agent.keys())[(1, 0)] == 3, "503 tried 3 times: the first try and 2 retries"
        agent.requests.clear()
        common = ("data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retry-backoff=0.01")
        second = run_rollouts(pytester, *common, "--rollouts-resume", "-v")
        sent = sorted((r["_ng_task_index"], r.get("_ng_attempt_index")) for r in agent.requests)
        assert sent == [(1, 1), (1, 1), (1, 1), (3, 1)], "the 503 was one attempt: tried again, 3 tries again"
    second.stdout.fnmatch_lines(
        [
            "*task[[]0[]] TIMEOUT_EXCEEDED*",
            "*task[[]1[]] AGENT_REQUEST_FAILED*",
            "*task[[]2[]] ROLLOUT_SKIPPED*",
            "*task[[]3[]] PASSED*",
            "*task[[]4[]] PASSED (reward 1; 1 cached)*",
        ]
    )
    artifacts = Artifacts(pytester.path)
    assert sorted(keys(artifacts.rows)) == [(3, 0), (4, 0)]
    assert [r.get("_ng_attempt_index") for r in artifacts.rows if r["_ng_task_index"] == 3] == [1]
    failures = sorted((f["_ng_task_index"], f["_ng_attempt_index"]) for f in artifacts.failures)
    assert failures == [(0, 0), (1, 0), (1, 1), (2, 0), (3, 0)], "one row per run's attempt"


def test_a_plain_resume_after_an_outage_sends_every_rollout_again(pytester: pytest.Pytester) -> None:
    """An agent down for the whole first run (every /run a 503): its in-run retries used to be three
    attempts each, the default cap, so a plain resume sent nothing and gave them up for good."""
    down = True

    def outage(row: dict[str, Any], seen: int) -> Reply:
        return Reply(status=503, raw=b"upstream unavailable") if down else verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(4))
    with ScriptedAgent(outage) as agent:
        first = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retry-backoff=0.01")
        assert first.parseoutcomes() == {"agent_request_failed": 4}
        assert len(agent.requests) == 12, "each rollout tried 3 times"
        assert "--rollouts-max-attempts" not in first.stdout.str(), "nothing given up yet"
        down = False
        agent.requests.clear()
        second = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume")
        assert second.ret == pytest.ExitCode.OK
        second.assert_outcomes(passed=4)
        assert sorted((r["_ng_task_index"], r["_ng_attempt_index"]) for r in agent.requests) == [
            (task, 1) for task in range(4)
        ]
    artifacts = Artifacts(pytester.path)
    assert sorted((r["_ng_task_index"], r["_ng_attempt_index"]) for r in artifacts.rows) == [(t, 1) for t in range(4)]
    failures = artifacts.failures
    assert sorted((f["_ng_task_index"], f["_ng_attempt_index"]) for f in failures) == [(t, 0) for t in range(4)]
    assert all([t["_ng_failure_http_status"] for t in f["_ng_earlier_tries"]] == [503, 503] for f in failures)


def test_a_rollout_that_failed_in_three_runs_is_not_sent_in_a_fourth(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap counts runs: each run tries (with its retries) once more, until three runs have failed;
    the run that used the last attempt, and every later one, says how to go on."""

    def task_1_down(row: dict[str, Any], seen: int) -> Reply:
        return Reply(status=503) if row["_ng_task_index"] == 1 else verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(3))
    hint = (
        "1 rollouts used their last attempt and no resume sends them again; to try them again, "
        "resume with a higher --rollouts-max-attempts (env NEMO_GYM_MAX_ROLLOUT_ATTEMPTS)"
    )
    with ScriptedAgent(task_1_down) as agent:
        common = ("data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retry-backoff=0.01")
        for run, resume in enumerate([(), ("--rollouts-resume",), ("--rollouts-resume",)]):
            agent.requests.clear()
            result = run_rollouts(pytester, *common, *resume)
            assert result.parseoutcomes()["agent_request_failed"] == 1
            sent = [r.get("_ng_attempt_index") for r in agent.requests if r["_ng_task_index"] == 1]
            assert sent == [run or None] * 3, f"run {run + 1}: one attempt of 3 tries"
            assert (hint in result.stdout.str()) is (run == 2), run
        agent.requests.clear()
        fourth = run_rollouts(pytester, *common, "--rollouts-resume", "-v")
        assert agent.requests == []
        fourth.stdout.fnmatch_lines(["*task[[]1[]] AGENT_REQUEST_FAILED*"])
        fourth.stdout.fnmatch_lines(["*rollout 0: agent_request_failed: gave up after 3 attempts (max 3)*"])
        assert hint in fourth.stdout.lines
        monkeypatch.setenv("NEMO_GYM_MAX_ROLLOUT_ATTEMPTS", "4")
        run_rollouts(pytester, *common, "--rollouts-resume")
        assert [r.get("_ng_attempt_index") for r in agent.requests] == [3] * 3, "a raised cap sends it again"
    failures = Artifacts(pytester.path).failures
    assert [(f["_ng_task_index"], f["_ng_attempt_index"]) for f in failures] == [(1, a) for a in range(4)]


def test_retry_terminal_timeouts_and_the_cap_from_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent(flaky_classes) as agent:
        common = ("data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retries=0")
        run_rollouts(pytester, *common)
        agent.requests.clear()
        reopen = ("--rollouts-resume", "--rollouts-retry-terminal-timeouts")
        monkeypatch.setenv("NEMO_GYM_MAX_ROLLOUT_ATTEMPTS", "1")
        run_rollouts(pytester, *common, *reopen)
        assert agent.requests == [], "one attempt each: the cap of 1 is reached"
        monkeypatch.setenv("NEMO_GYM_MAX_ROLLOUT_ATTEMPTS", "2")
        run_rollouts(pytester, *common, *reopen)
        sent = [(r["_ng_task_index"], r.get("_ng_attempt_index")) for r in agent.requests]
    assert sorted(sent) == [(0, 1), (1, 1)], "timeout reopened, 503 gets a 2nd attempt, skipped never"


def test_truncated_tail_is_repaired_and_rerun(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(4))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    out = Artifacts(pytester.path).out
    kept = [line for line in out.read_bytes().splitlines(keepends=True) if b'"_ng_task_index":2,' not in line]
    torn = b'{"reward":1.0,"_ng_task_index":2,"_ng_rollout'
    out.write_bytes(b"".join(kept) + torn)
    agent.requests.clear()
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume")
    result.stdout.fnmatch_lines([f"*r.jsonl: dropped a last line cut short by a crash ({len(torn)} bytes)*"])
    assert agent.keys() == [(2, 0)]
    assert sorted(keys(Artifacts(pytester.path).rows)) == [(0, 0), (1, 0), (2, 0), (3, 0)]


def test_a_cut_materialized_file_is_refused_not_shrunk(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """The materialized inputs are the run's denominator: a key cut from them would leave the
    score silently, and no crash can cut them (they are written whole and renamed into place)."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    materialized = Artifacts(pytester.path).materialized_path
    materialized.write_bytes(materialized.read_bytes()[:-10])
    agent.requests.clear()
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cannot resume: *r_materialized_inputs.jsonl ends in a line cut short (*bytes)*"])
    assert agent.requests == []


def test_malformed_artifact_line_is_an_error_naming_it(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    out = Artifacts(pytester.path).out
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(lines[0] + b"{oops\n" + b"".join(lines[1:]))
    agent.requests.clear()
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cannot resume: *r.jsonl:2: not valid JSON*"])
    assert agent.requests == []


def test_changed_input_is_detected_and_named(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    rows = tasks(3)
    write_rows(pytester.path / "data.jsonl", rows)
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    rows[1]["expected_answer"] = "changed"
    write_rows(pytester.path / "data.jsonl", rows)
    agent.requests.clear()
    result = run_rollouts(
        pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume", "--rollouts-repeats=2"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*cannot resume*the input changed*",
            "*repeats: recorded 1, now 2*",
            "*dataset data.jsonl changed: recorded 3 rows sha256*",
            "*--rollouts-resume-recorded*",
        ]
    )
    assert agent.requests == []
    result = run_rollouts(
        pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume", "--rollouts-resume-recorded"
    )
    result.assert_outcomes(passed=3)
    assert agent.requests == [], "the recorded set was already complete"


def test_fresh_run_moves_earlier_results_aside(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    # The live status file is a view, not a result: the next run replaces it where it is.
    earlier = [p for p in (pytester.path / "out").glob("r*.json*") if not p.name.endswith(".status.json")]
    before = {p.name: p.read_bytes() for p in earlier}
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-limit=1")
    result.stdout.fnmatch_lines(["*earlier results were moved to *r.prev-*--rollouts-resume*"])
    [backup] = (pytester.path / "out").glob("r.prev-*")
    assert {p.name: p.read_bytes() for p in backup.iterdir()} == before
    assert keys(Artifacts(pytester.path).rows) == [(0, 0)]


def test_a_fresh_run_after_one_that_only_failed_moves_its_sidecar_aside(pytester: pytest.Pytester) -> None:
    """With no result row, the earlier run's sidecar (its attempts and terminal verdicts) was deleted."""
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent(lambda row, seen: Reply(status=500)) as agent:
        run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
        before = Artifacts(pytester.path).failures_path.read_bytes()
        assert Artifacts(pytester.path).rows == [] and before
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    result.stdout.fnmatch_lines(["*earlier results were moved to *r.prev-*--rollouts-resume*"])
    [backup] = (pytester.path / "out").glob("r.prev-*")
    assert (backup / "r_failures.jsonl").read_bytes() == before


def test_a_fresh_run_after_one_killed_before_any_row_moves_its_inputs_aside(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """Its materialized inputs (what a resume would go on) were overwritten."""
    write_rows(pytester.path / "data.jsonl", tasks(2))
    earlier = write_rows(pytester.path / "out" / "r_materialized_inputs.jsonl", [{"earlier": True}])
    before = earlier.read_bytes()
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    result.assert_outcomes(passed=2)
    [backup] = (pytester.path / "out").glob("r.prev-*")
    assert (backup / "r_materialized_inputs.jsonl").read_bytes() == before


def test_last_failed_reruns_only_failed_items_with_resume_semantics(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(4))

    def first_try_fails(row: dict[str, Any], seen: int) -> Reply:
        return Reply(status=500) if row["_ng_task_index"] == 2 and seen == 0 else verifier(row, seen)

    with ScriptedAgent(first_try_fails) as agent:
        args = ("-p", "no:asyncio", "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-out=out/r.jsonl")
        pytester.runpytest(*args).stdout.fnmatch_lines(["*3 passed, 1 agent_run_error*"])
        agent.requests.clear()
        result = pytester.runpytest(*args, "--lf")
        result.assert_outcomes(passed=1, deselected=3)
        assert "/4 tasks done" not in result.stdout.str(), "progress counts the items --lf kept"
        assert [(r["_ng_task_index"], r.get("_ng_attempt_index")) for r in agent.requests] == [(2, 1)]
    assert sorted(keys(Artifacts(pytester.path).rows)) == [(0, 0), (1, 0), (2, 0), (3, 0)]


def test_longest_first_starts_the_slowest_tasks_first(pytester: pytest.Pytester) -> None:
    """The order follows the latencies the earlier run's rows record. They are written into its
    failures file rather than made by a slow agent: ``elapsed_seconds`` is wall time, and on a loaded
    machine the scheduling noise in it is as large as the gaps a test can afford (tens of
    milliseconds), so measured latencies would let the noise decide the order."""
    write_rows(pytester.path / "data.jsonl", tasks(5))
    recorded = {0: 0.05, 1: 0.4, 2: 0.0, 3: 0.25, 4: 0.1}

    def fail_then_verify(row: dict[str, Any], seen: int) -> Reply:
        return Reply(status=503) if seen == 0 else verifier(row, seen)

    artifacts = Artifacts(pytester.path)
    with ScriptedAgent(fail_then_verify) as agent:
        common = ("data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-retries=0", "--rollouts-parallel=1")
        run_rollouts(pytester, *common)
        earlier = artifacts.failures
        assert sorted(row["_ng_task_index"] for row in earlier) == [0, 1, 2, 3, 4]
        write_rows(
            artifacts.failures_path,
            [{**row, "elapsed_seconds": recorded[row["_ng_task_index"]]} for row in earlier],
        )
        agent.requests.clear()
        run_rollouts(pytester, *common, "--rollouts-resume", "--rollouts-longest-first")
        assert [r["_ng_task_index"] for r in agent.requests] == [1, 3, 4, 0, 2]


@pytest.mark.parametrize(
    ("history", "verdict"),
    [
        (None, Verdict.RUN),
        (KeyHistory(succeeded=True, failures=2), Verdict.DONE),
        (KeyHistory(failures=1, latest_class="timeout_exceeded", latest_terminal=True), Verdict.TERMINAL),
        (KeyHistory(failures=1, latest_class="skipped"), Verdict.TERMINAL),
        (KeyHistory(failures=3, latest_class="agent_request_failed"), Verdict.CAPPED),
        (KeyHistory(failures=2, latest_class="agent_request_failed"), Verdict.RUN),
    ],
)
def test_decide(history: KeyHistory | None, verdict: Verdict) -> None:
    assert decide(history, max_attempts=3, retry_terminal_timeouts=False) is verdict


def test_retry_terminal_timeouts_never_reopens_skipped() -> None:
    timeout = KeyHistory(failures=1, latest_class="timeout_exceeded", latest_terminal=True)
    skipped = KeyHistory(failures=1, latest_class="skipped", latest_terminal=True)
    assert decide(timeout, max_attempts=3, retry_terminal_timeouts=True) is Verdict.RUN
    assert decide(skipped, max_attempts=3, retry_terminal_timeouts=True) is Verdict.TERMINAL


def test_resume_without_earlier_run_is_a_fresh_run(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume")
    result.assert_outcomes(passed=2)
    assert os.path.exists(Artifacts(pytester.path).materialized_path)


def test_resume_recorded_goes_on_with_the_recorded_agents_when_the_routing_changed(pytester: pytest.Pytester) -> None:
    """The refusal's own advice: every item was skipped as "not part of the recorded set", nothing sent."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    fails = {1}

    def first_try_of_task_1_fails(row: dict, seen: int) -> Reply:
        if row["_ng_task_index"] in fails:
            fails.clear()
            return Reply(status=500)
        return verifier(row, seen)

    with ScriptedAgent(first_try_of_task_1_fails) as a, ScriptedAgent() as b:
        agents = (f"--rollouts-agent=a={a.url}", f"--rollouts-agent=b={b.url}")
        run_rollouts(pytester, "data.jsonl", *agents, "--rollouts-agent-map=_default=a")
        moved = (*agents, "--rollouts-agent-map=_default=b", "--rollouts-resume")
        refused = run_rollouts(pytester, "data.jsonl", *moved)
        assert refused.ret == pytest.ExitCode.USAGE_ERROR
        run_rollouts(pytester, "data.jsonl", *moved, "--rollouts-resume-recorded").assert_outcomes(passed=3)
        assert a.keys()[3:] == [(1, 0)] and b.requests == []
    assert sorted(keys(Artifacts(pytester.path).rows)) == [(0, 0), (1, 0), (2, 0)]
