"""``-n`` changes nothing but speed: every rollout once, one score, full windows on every worker."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from typing import Any

import execnet
import pytest

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import QUIET, Artifacts, file_size_limit, keys, pytest_command, stop_midway, tasks, write_rows


def run_n(pytester: pytest.Pytester, agent: ScriptedAgent, workers: int, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        *QUIET,
        "-n",
        str(workers),
        "data.jsonl",
        f"--rollouts-agent={agent.url}",
        f"--rollouts-out=n{workers}/r.jsonl",
        *args,
    )


def test_n2_equals_n0(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(30))
    (pytester.path / "n2").mkdir()
    (pytester.path / "n2" / "r.jsonl").write_text('{"stale": true}\n')
    single = pytester.runpytest(
        *QUIET, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-out=n0/r.jsonl", "--rollouts-repeats=3"
    )
    single.assert_outcomes(passed=30)
    double = run_n(pytester, agent, 2, "--rollouts-repeats=3")
    double.assert_outcomes(passed=30)
    one, two = Artifacts(pytester.path, "n0/r.jsonl"), Artifacts(pytester.path, "n2/r.jsonl")
    assert sorted(keys(two.rows)) == sorted(keys(one.rows)) == sorted(keys(two.materialized))
    assert len(keys(two.rows)) == len(set(keys(two.rows))) == 90
    metrics = [
        [{k: v for k, v in entry.items() if k != "perf_summary"} for entry in json.loads(path.read_text())]
        for path in (pytester.path / d / "r_aggregate_metrics.json" for d in ("n0", "n2"))
    ]
    assert metrics[0] == metrics[1], "the same metrics to the last digit (the session's latency aside)"
    double.stdout.fnmatch_lines(["default: mean reward 0.6667*over 90 rollouts*"])
    assert double.stdout.str().count("[local metrics]") == 1, "scored once, on the controller"
    assert list((pytester.path / "n2").glob("r.prev-*")), "the stale output was moved aside, once"


def test_x_stops_the_run_and_it_is_scored_and_gated_as_without_n(pytester: pytest.Pytester) -> None:
    """xdist ends a -x run as interrupted; the run is still scored from disk and gated once."""
    write_rows(pytester.path / "data.jsonl", tasks(40))

    def fails_task_3(row: dict[str, Any], seen: int) -> Reply:
        return Reply(status=500) if row["_ng_task_index"] == 3 else verifier(row, seen)

    with ScriptedAgent(fails_task_3, latency=0.1) as agent:
        result = run_n(pytester, agent, 2, "-x", "--rollouts-parallel=2", "--rollouts-require-complete")
    assert result.ret == 6, result.stdout.str()
    result.stdout.fnmatch_lines(["*EVAL FAILED: */40 samples completed. Partial artifacts retained at *"])
    result.stdout.fnmatch_lines(["Metrics cover: * of 40 rollouts"])
    result.stdout.fnmatch_lines(
        ["failed items:", "  data.jsonl::task?3? rollout 0: agent_run_error: agent answered HTTP 500*"]
    )
    [metrics] = json.loads((pytester.path / "n2" / "r_aggregate_metrics.json").read_text())
    assert metrics["coverage"]["completed"] == len(Artifacts(pytester.path, "n2/r.jsonl").rows) < 40


def test_parallel_is_the_total_and_windows_stay_full(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(60))
    with ScriptedAgent(latency=0.1) as agent:
        result = run_n(pytester, agent, 2, "--rollouts-parallel=8")
        result.assert_outcomes(passed=60)
        assert agent.peak_in_flight == 8
    progress = [line for line in result.stdout.lines if "rollouts: " in line and " tasks done" in line]
    assert progress and all(line.startswith("rollouts: ") for line in progress), (
        "progress lines start a line of their own, not after the letters xdist writes"
    )


@pytest.mark.parametrize("dist", ["worksteal", "each", "loadfile"])
def test_duplicating_or_starving_modes_are_refused(pytester: pytest.Pytester, agent: ScriptedAgent, dist: str) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(4))
    result = run_n(pytester, agent, 2, f"--dist={dist}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*rollouts cannot run under --dist {dist}*use --dist load*"])
    assert agent.requests == []


def test_refused_for_a_suite_without_options(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "s" / "data.jsonl", tasks(4))
    (pytester.path / "s" / "rollouts.toml").write_text(
        f'datasets = ["data.jsonl"]\nagent = "a"\n[agents.a]\nurl = "{agent.url}"\n'
    )
    result = pytester.runpytest_subprocess(*QUIET, "-n", "2", "--dist=worksteal", "s")
    assert result.ret == pytest.ExitCode.INTERRUPTED, "a worker's collection error stops the run"
    result.stdout.fnmatch_lines(["*rollouts cannot run under --dist worksteal*"])
    assert agent.requests == []


def test_a_refusal_while_collecting_is_a_usage_error_as_in_one_process(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """A worker raised it and ended with items queued for it: the controller crashed (an xdist
    INTERNALERROR, exit 3) and the reason was printed nowhere."""
    write_rows(pytester.path / "data.jsonl", tasks(4))
    pytester.runpytest(*QUIET, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-out=n2/r.jsonl")
    write_rows(pytester.path / "data.jsonl", tasks(5))
    agent.requests.clear()
    result = run_n(pytester, agent, 2, "--rollouts-resume")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    said = result.stderr.str()
    assert said.count("the input changed since the recorded run") == 1, said
    result.stderr.fnmatch_lines(["ERROR: cannot resume *: the input changed since the recorded run:"])
    assert "INTERNALERROR" not in result.stdout.str() + said
    assert agent.requests == []


def test_a_resume_refusing_its_recorded_files_under_n_keeps_them_and_says_why_once(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """Refused while preparing (its materialized inputs edited): the controller crashed (exit 3, no
    reason), and then, taking the refused resume for a fresh run, removed the run's every file."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    pytester.runpytest(*QUIET, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-out=n2/r.jsonl")
    materialized = pytester.path / "n2/r_materialized_inputs.jsonl"
    materialized.write_bytes(b"".join(materialized.read_bytes().splitlines(keepends=True)[:2]))
    before = {p: p.read_bytes() for p in (pytester.path / "n2").iterdir() if not p.name.startswith(".")}
    agent.requests.clear()
    result = run_n(pytester, agent, 2, "--rollouts-resume")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    assert result.stderr.str().count("is not the materialized inputs this run wrote") == 1
    assert {p: p.read_bytes() for p in (pytester.path / "n2").iterdir() if not p.name.startswith(".")} == before
    assert agent.requests == []


def test_a_bad_row_under_n_stops_the_run_before_any_item_as_in_one_process(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """xdist's worker loop ran the other files' items after the collection error: each failed with
    a traceback, for want of a dispatcher (exit 1)."""
    write_rows(pytester.path / "data.jsonl", tasks(4))
    (pytester.path / "bad.jsonl").write_text('{"responses_create_params": {"input": "a"}}\nnot json\n')
    result = run_n(pytester, agent, 2, "bad.jsonl")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.stdout.fnmatch_lines(["bad.jsonl:2: not valid JSON*", "*Interrupted: 1 error during collection*"])
    result.assert_outcomes(errors=1)
    assert "Traceback" not in result.stdout.str() and "RuntimeError" not in result.stdout.str()
    assert agent.requests == []


# gw1 kills itself (SIGKILL) once, in the given hook, the nth time it runs there.
KILLER = """
import os, signal
seen = []
worker = []
def pytest_configure(config):  # not the environment's: an outer xdist run's gw1 passes it to this session
    worker.append(getattr(config, "workerinput", {{}}).get("workerid"))
def pytest_runtest_{hook}(nodeid, location):
    seen.append(nodeid)
    if worker == ["gw1"] and len(seen) == {nth}:
        open("killed", "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize(
    ("hook", "nth"),
    [
        # logstart: it has just reported its previous item done, and the controller is sending it
        # more; the first time, while the controller may still be sending its first items.
        ("logstart", 1),
        ("logstart", 2),
        ("logstart", 6),
        # logfinish: its item's rollouts are written, but it has not reported the item done.
        ("logfinish", 1),
        ("logfinish", 5),
    ],
)
def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(pytester: pytest.Pytester, hook: str, nth: int) -> None:
    """The controller ended in an INTERNALERROR ('cannot send (already closed?)') when it sent work
    to the dying worker, and the item the worker died in was reported failed (exit 1)."""
    pytester.makeconftest(KILLER.format(hook=hook, nth=nth))
    write_rows(pytester.path / "data.jsonl", tasks(24))
    with ScriptedAgent(latency=0.02) as agent:
        result = run_n(pytester, agent, 2, "--rollouts-parallel=8")
    output = result.stdout.str() + result.stderr.str()
    assert (pytester.path / "killed").exists()
    assert "INTERNALERROR" not in output, output
    assert result.ret == pytest.ExitCode.OK, output
    result.stdout.fnmatch_lines(["*replacing crashed worker gw1*"])
    # Each item counted once: the one it died in runs again, unless it had reported its outcome.
    rerun = ", 1 rerun" if hook == "logstart" else ""
    result.stdout.re_match_lines([rf"=+ 24 passed{rerun} in .*"])
    artifacts = Artifacts(pytester.path, "n2/r.jsonl")
    written = keys(artifacts.rows)
    assert len(written) == len(set(written)), "no key written twice"
    assert sorted(written) == sorted(keys(artifacts.materialized)), "nothing lost"
    result.stdout.fnmatch_lines(["default: mean reward * over 24 rollouts*"])


def test_a_worker_found_dead_while_sending_it_work_gets_none_and_loses_none(pytester: pytest.Pytester) -> None:
    """The race the kills above hit about one run in eight, made certain: the worker is dead, but
    xdist has not yet handled its death (``errordown`` is queued behind the event being handled),
    when finishing an item makes the scheduler top it up. The write raised 'cannot send (already
    closed?)' out of the controller's loop."""
    from pytest_rollouts.pytest.xdist import RolloutScheduling

    gateway = execnet.makegateway("popen")
    channel = gateway.remote_exec("import os\nchannel.send(os.getpid())\nwhile True:\n    channel.receive()")
    pid = channel.receive()

    class Worker:  # what the scheduler sees of a WorkerController before xdist marks it down
        shutting_down = False

        def send_runtest_some(self, indices: list[int]) -> None:
            channel.send(("runtests", {"indices": indices}))

    worker = Worker()
    try:
        scheduler = RolloutScheduling(pytester.parseconfig("--tx", "popen"), None, parallel=2, repeats=1)
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, [f"data.jsonl::task[{i}]" for i in range(10)])
        scheduler.schedule()
        queued, left = list(scheduler.node2pending[worker]), list(scheduler.pending)
        assert queued and left, "it has work, and there is more to send"
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(OSError):  # wait until writing to it fails: its pipe is closed
            while True:
                worker.send_runtest_some([])
        scheduler.mark_test_complete(worker, queued[0])
    finally:
        gateway.exit()
    assert scheduler.pending == left, "nothing more was sent to it: all of it is left for live workers"
    assert scheduler.node2pending[worker] == queued[1:]


def test_resume_after_an_n2_run(pytester: pytest.Pytester) -> None:
    def task_3_breaks_once(row: dict[str, Any], seen: int) -> Reply:
        return Reply(status=500) if row["_ng_task_index"] == 3 and seen == 0 else verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(10))
    with ScriptedAgent(task_3_breaks_once) as agent:
        run_n(pytester, agent, 2).stdout.fnmatch_lines(["*9 passed, 1 agent_run_error*"])
        agent.requests.clear()
        resumed = run_n(pytester, agent, 2, "--rollouts-resume")
        resumed.assert_outcomes(passed=10)
        assert [(r["_ng_task_index"], r.get("_ng_attempt_index")) for r in agent.requests] == [(3, 1)]
    assert sorted(keys(Artifacts(pytester.path, "n2/r.jsonl").rows)) == [(t, 0) for t in range(10)]


def test_unhealthy_agent_stops_every_worker_before_any_run(pytester: pytest.Pytester) -> None:
    """Said once, as one process says it: each worker failed an item with it, and xdist said it again."""
    write_rows(pytester.path / "data.jsonl", tasks(8))
    with ScriptedAgent(health=Reply(status=503, json={"status": "starting"})) as sick:
        result = run_n(pytester, sick, 2)
        assert result.ret == pytest.ExitCode.INTERRUPTED
        result.stdout.fnmatch_lines(
            ["*Refused: agents failed their health check; nothing was dispatched:*", f"*{sick.url}: HTTP 503*"]
        )
        said = result.stdout.str() + result.stderr.str()
        assert said.count("agents failed their health check") == 1, said
        assert "FAILURES" not in said and "failed" not in result.outlines[-1]
        assert sick.requests == []


def test_each_worker_sends_the_task_it_waits_on_first(pytester: pytest.Pytester) -> None:
    """It claimed the tasks queued behind its running one first: task 0 went out after all of them,
    and under a dispatch budget was never sent while later tasks were."""
    write_rows(pytester.path / "data.jsonl", tasks(60))
    with ScriptedAgent(latency=0.05) as agent:
        assert run_n(pytester, agent, 2, "--rollouts-parallel=4", "--rollouts-repeats=3").ret == pytest.ExitCode.OK
        order = [row["_ng_task_index"] for row in agent.requests]
        ports = agent.ports
    # Told apart by connection: both workers send at once, and one may start well before the other.
    first = order.index(0)
    assert ports.count(ports[first]) >= 10, (
        "its connection carries its worker's later requests (else this says nothing)"
    )
    on_its_connection = [task for task, port in zip(order[:first], ports[:first], strict=True) if port == ports[first]]
    assert len(on_its_connection) < 4, f"task 0 went out after tasks {on_its_connection} on its worker's connection"


def test_a_run_no_worker_sent_anything_for_leaves_earlier_results_in_place(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """As one process does: the workers had moved them aside and left empty files in their place.
    Their health checks now come before anything is moved: nothing is, so nothing is put back."""
    write_rows(pytester.path / "data.jsonl", tasks(6))
    assert run_n(pytester, agent, 2).ret == pytest.ExitCode.OK
    before = {p.name: p.read_bytes() for p in (pytester.path / "n2").glob("r*")}
    with ScriptedAgent(health=Reply(status=503)) as sick:
        result = run_n(pytester, sick, 2)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert {p.name: p.read_bytes() for p in (pytester.path / "n2").glob("r*")} == before
    result.stdout.fnmatch_lines(["*agents failed their health check; nothing was dispatched:*"])
    result.stdout.no_fnmatch_line("*back in place*")
    result.stdout.no_fnmatch_line("*rollouts scored*")
    assert not list((pytester.path / "n2").glob("r.prev-*"))


def test_a_dispatch_that_stops_on_a_worker_is_scored_like_one_process(pytester: pytest.Pytester) -> None:
    """It crashed the controller (INTERNALERROR, a worker gone with items queued), or was left
    unscored as interrupted (exit 2)."""
    write_rows(pytester.path / "data.jsonl", tasks(20))

    def padded(row: dict[str, Any], seen: int) -> Reply:
        return Reply(json={**verifier(row, seen).json, "pad": "x" * 300})

    with ScriptedAgent(padded, latency=0.05) as agent:
        command = [sys.executable, "-m", "pytest", *QUIET, "-n", "2", "data.jsonl", f"--rollouts-agent={agent.url}"]
        command += ["--rollouts-out=out/r.jsonl", "--rollouts-parallel=4", "--rollouts-no-aggregate"]
        done = subprocess.run(
            command, cwd=pytester.path, capture_output=True, text=True, timeout=120, preexec_fn=file_size_limit(5000)
        )
        assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr
        assert "INTERNALERROR" not in done.stdout + done.stderr
        assert "dispatch stopped: cannot write" in done.stdout and "File too large" in done.stdout
        assert "Rollouts missing from the score:" in done.stdout, "scored from disk"
        section = done.stdout.split("= rollouts =", 1)[1].split("short test summary", 1)[0]
        assert "dispatch stopped: cannot write" in section, "the section says why, as in one process"
        resumed = run_n(pytester, agent, 2, "--rollouts-resume", "--rollouts-out=out/r.jsonl")
    assert resumed.ret == 0, resumed.stdout.str()
    rows = Artifacts(pytester.path, "out/r.jsonl").rows
    assert sorted(keys(rows)) == [(t, 0) for t in range(20)]


def test_sigterm_stops_an_n2_run_like_ctrl_c(pytester: pytest.Pytester) -> None:
    """The controller never dispatches, so it never took SIGTERM: it died with no summary (143)."""
    write_rows(pytester.path / "data.jsonl", tasks(80))
    out = pytester.path / "out" / "r.jsonl"
    with ScriptedAgent(latency=0.3) as agent:
        command = pytest_command(agent.url, "-n", "2", "--rollouts-parallel=4")
        returncode, output = stop_midway(command, pytester.path, out, signal.SIGTERM)
    assert returncode == pytest.ExitCode.INTERRUPTED, output.decode()
    assert re.search(rb"Rollouts missing from the score: \d+ of 80 materialized", output), output.decode()


def test_progress_under_n_counts_rollout_items_only(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """A .py test in the session was counted as a task ('/4 tasks done' for 3 tasks)."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    pytester.makepyfile(test_plain="def test_ok():\n    pass\n")
    result = run_n(pytester, agent, 2, "test_plain.py")
    result.assert_outcomes(passed=4)
    output = result.stdout.str()
    assert "/3 tasks done" in output and "/4 tasks done" not in output, output


def test_ctrl_c_under_n2_gives_one_count_in_every_line(pytester: pytest.Pytester) -> None:
    """It read '24 of 24 rollouts scored', then 'Metrics cover: 44 of 80', then a mean over 24
    rollouts 'reported this session': the controller's reports against the whole run on disk.
    Now the whole run's lines agree with each other, and the session's line says it is one."""
    write_rows(pytester.path / "data.jsonl", tasks(80))
    out = pytester.path / "out" / "r.jsonl"
    with ScriptedAgent(latency=0.3) as agent:
        command = pytest_command(agent.url, "-n", "2", "--rollouts-parallel=4")
        returncode, output = stop_midway(command, pytester.path, out, signal.SIGINT)
    text = output.decode()
    assert returncode == pytest.ExitCode.INTERRUPTED, text
    section = text.split("= rollouts =", 1)[1]
    on_disk = len(Artifacts(pytester.path, "out/r.jsonl").rows)
    scored = re.search(r"whole run: (\d+) of 80 rollouts scored", section)
    missing = re.search(r"Rollouts missing from the score: (\d+) of 80 materialized", section)
    ran = re.search(r"(\d+) rollouts (reported this session )?ran in ", section)
    assert scored and missing and ran, section
    assert int(scored[1]) == on_disk == 80 - int(missing[1]), section
    if not ran[2]:  # the workers said how many they sent before the controller ended
        assert int(ran[1]) == on_disk, "what the workers sent, not what their items reported before the stop"
    assert re.search(r"this session: \d+ rollouts reported", section), section
    assert "mean reward" not in section, "no mean of the session's part beside the run's"
    assert "Metrics cover" not in section, "a run stopped before its metrics has no mean to cover anything"
