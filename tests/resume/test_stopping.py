"""A stop (Ctrl-C, SIGTERM, a kill, an error) at any moment of a run ends it promptly and cleanly.

Each test drives a real pytest process and a real dispatcher process with real signals, at one
moment of the run: the dispatcher starting up, the plan going to it, health checks, dispatch,
scoring. A session that hangs fails the test through the bound on ``communicate``.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ..agents import Reply, ScriptedAgent
from ..helpers import Artifacts, dispatchers_of, one_rollout_dispatcher, pytest_command, run_rollouts, tasks, write_rows
from .stops import BOUND_S, assert_no_traceback, engines, finish, gone, session, wait_for

REPO = Path(__file__).resolve().parents[2]
# Finds this pytest's dispatcher process among its children.
FIND_ENGINE = """
import os, signal
from pathlib import Path

def engine_pid():
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if proc.name.isdigit() and parent == os.getpid() and b"pytest_rollouts.dispatch.engine" in cmdline:
            return int(proc.name)
    raise AssertionError("no dispatcher process")
"""


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_the_plan_goes_out_ends_the_session(pytester: pytest.Pytester, stop: int) -> None:
    """pytest blocked writing a plan the dispatcher does not take (stopped here; in life still
    starting up, or stuck): a stop then left the two processes waiting on each other for ever."""
    # Stopped as the run loop begins: the files are prepared, the agents cleared, and the plan is next.
    pytester.makeconftest(
        FIND_ENGINE + "import pytest\n@pytest.hookimpl(wrapper=True, tryfirst=True)\n"
        "def pytest_runtestloop(session):\n"
        "    pid = engine_pid()\n"
        "    os.kill(pid, signal.SIGSTOP)\n"
        "    Path('engine.pid').write_text(str(pid))\n"
        "    return (yield)\n"
    )
    # About 170 KB of plan (12,000 rollouts, some 14 bytes each): more than a pipe holds, so pytest
    # blocks writing it.
    write_rows(pytester.path / "data.jsonl", tasks(600))
    with ScriptedAgent() as agent:
        command = pytest_command(agent.url, "--rollouts-repeats=20")
        with session(pytester.path, command) as proc:
            wait_for(lambda: bool(engines(pytester.path)), "the dispatcher was stopped")
            time.sleep(0.5)  # pytest goes on to write the plan, and blocks
            os.killpg(proc.pid, stop)
            out, err = finish(proc)
            [engine] = engines(pytester.path)
            wait_for(lambda: gone(engine), "the dispatcher process ended")
        assert agent.requests == []
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert "Interrupted before any request was sent: its files are removed." in out, out
    assert_no_traceback(err)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_during_health_checks_ends_at_once_and_says_what_to_do(pytester: pytest.Pytester, stop: int) -> None:
    """The session waited for the health checks to end and then printed no rollouts section."""
    write_rows(pytester.path / "data.jsonl", tasks(12))
    with ScriptedAgent(health=Reply(json={"status": "ok"}, delay=60)) as agent:
        with session(pytester.path, pytest_command(agent.url, "--rollouts-repeats=2")) as proc:
            wait_for(lambda: agent.health_checks > 0, "a health check")
            os.killpg(proc.pid, stop)
            out, err = finish(proc)
        assert agent.requests == []
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert "Interrupted before any request was sent: nothing was moved or written." in out, out
    assert not (pytester.path / "out" / "r_materialized_inputs.jsonl").exists(), "left as found: nothing was sent"
    assert_no_traceback(err)


def test_a_dispatcher_dying_during_health_checks_fails_the_session_clearly(pytester: pytest.Pytester) -> None:
    """The dispatcher process checks the agents' health for pytest: killed while it does, the
    session says so (exit 3) rather than waits, and the earlier results stay where they were."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent() as agent:
        subprocess.run(pytest_command(agent.url), cwd=pytester.path, check=True, capture_output=True)
    before = (pytester.path / "out" / "r.jsonl").read_bytes()
    with ScriptedAgent(health=Reply(json={"status": "ok"}, delay=60)) as agent:
        with session(pytester.path, pytest_command(agent.url)) as proc:
            wait_for(lambda: agent.health_checks > 0, "a health check")
            [engine] = dispatchers_of(proc.pid)
            os.kill(engine, signal.SIGKILL)
            out, err = finish(proc)
        assert agent.requests == []
    assert proc.returncode == pytest.ExitCode.INTERNAL_ERROR, out + err
    said = "the dispatcher process exited while it checked the agents' health (killed by signal 9); nothing was sent"
    assert said in out + err, out + err
    assert (pytester.path / "out" / "r.jsonl").read_bytes() == before
    assert not [p for p in (pytester.path / "out").iterdir() if "prev" in p.name or "replaced" in p.name]
    assert_no_traceback(err)


def test_a_dispatcher_stopped_during_health_checks_fails_the_session_instead_of_hanging_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dispatcher process that gives no answer (here SIGSTOP; in life blocked in the kernel) held
    pytest's wait for the health check for ever: it is bounded by the process's start and the checks'
    own bound (here lowered to a second or two), then the session says so (exit 3), kills it, sends nothing."""
    process = importlib.import_module("pytest_rollouts.dispatch.process")
    monkeypatch.setattr(process, "START_LIMIT_S", 1.0)
    monkeypatch.setattr(process, "HEALTH_CHECK_S", 0.5)
    write_rows(pytester.path / "data.jsonl", tasks(3))
    stopped: list[int] = []

    def stop_the_dispatcher() -> None:
        wait_for(lambda: agent.health_checks > 0, "a health check")
        [engine] = dispatchers_of(os.getpid())
        os.kill(engine, signal.SIGSTOP)
        stopped.append(engine)

    with ScriptedAgent(health=Reply(json={"status": "ok"}, delay=30)) as agent:
        stopper = threading.Thread(target=stop_the_dispatcher, daemon=True)
        stopper.start()
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
        stopper.join(BOUND_S)
        assert agent.requests == []
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR, result.stdout.str()
    said = f"the dispatcher process (pid {stopped[0]}) gave no answer to the agents' health check in 2.5s"
    result.stdout.fnmatch_lines([f"*{said}: it is stopped or stuck; nothing was sent*"])
    assert dispatchers_of(os.getpid()) == [], "the stopped process was killed and reaped"
    assert_no_traceback(result.stdout.str())


def test_a_stop_under_xdist_before_any_result_puts_the_earlier_results_back(pytester: pytest.Pytester) -> None:
    """The workers had not said what they did when the controller's session ended: the earlier
    results stayed moved aside, without a line saying so, and the run read as one of nothing."""
    write_rows(pytester.path / "data.jsonl", tasks(6))
    with ScriptedAgent() as agent:
        subprocess.run(pytest_command(agent.url), cwd=pytester.path, check=True, capture_output=True)
    before = (pytester.path / "out" / "r.jsonl").read_bytes()
    with ScriptedAgent(health=Reply(json={"status": "ok"}, delay=60)) as agent:
        with session(pytester.path, pytest_command(agent.url, "-n", "2")) as proc:
            wait_for(lambda: agent.health_checks > 0, "a health check")
            os.killpg(proc.pid, signal.SIGINT)
            out, err = finish(proc)
        assert agent.requests == []
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert (pytester.path / "out" / "r.jsonl").read_bytes() == before
    assert not [p for p in (pytester.path / "out").iterdir() if "prev" in p.name or "replaced" in p.name]


@pytest.mark.parametrize("replace", [(), ("--rollouts-overwrite",)], ids=["moved-aside", "overwrite"])
def test_a_stop_during_health_checks_puts_back_the_earlier_results(
    pytester: pytest.Pytester, replace: tuple[str, ...]
) -> None:
    """--rollouts-overwrite deleted the earlier results as the files were prepared: a Ctrl-C before
    the first request left neither them nor a run. Moved aside, they stayed in a folder."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent() as agent:
        subprocess.run(pytest_command(agent.url), cwd=pytester.path, check=True, capture_output=True)
    before = (pytester.path / "out" / "r.jsonl").read_bytes()
    with ScriptedAgent(health=Reply(json={"status": "ok"}, delay=60)) as agent:
        with session(pytester.path, pytest_command(agent.url, *replace)) as proc:
            wait_for(lambda: agent.health_checks > 0, "a health check")
            os.killpg(proc.pid, signal.SIGINT)
            out, err = finish(proc)
        assert agent.requests == []
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert "Interrupted before any request was sent: nothing was moved or written." in out, out
    assert (pytester.path / "out" / "r.jsonl").read_bytes() == before
    assert not [p for p in (pytester.path / "out").iterdir() if "replaced" in p.name or "prev" in p.name]
    assert_no_traceback(err)


@pytest.mark.parametrize("replace", [(), ("--rollouts-overwrite",)], ids=["moved-aside", "overwrite"])
def test_a_kill_during_health_checks_leaves_the_earlier_results_in_place(
    pytester: pytest.Pytester, replace: tuple[str, ...]
) -> None:
    """The plugin moved the earlier results aside before its health check: Ctrl-C and SIGTERM put
    them back, but ``kill -9`` during a slow check left them moved (issue 32, F10). Nothing that
    can refuse the run without sending anything comes after a file is moved now."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent() as agent:
        subprocess.run(pytest_command(agent.url), cwd=pytester.path, check=True, capture_output=True)
    before = {p.name: p.read_bytes() for p in (pytester.path / "out").iterdir()}
    with ScriptedAgent(health=Reply(json={"status": "ok"}, delay=60)) as agent:
        with session(pytester.path, pytest_command(agent.url, *replace)) as proc:
            wait_for(lambda: agent.health_checks > 0, "a health check")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=BOUND_S)
        assert agent.requests == []
    # The lock file a killed run leaves is taken over by the next run; the results are as they were.
    after = {p.name: p.read_bytes() if p.is_file() else "a folder" for p in (pytester.path / "out").iterdir()}
    assert {name: data for name, data in after.items() if not name.endswith(".lock")} == {
        name: data for name, data in before.items() if not name.endswith(".lock")
    }


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_scoring_prints_the_section_and_a_resume_scores_the_run(
    pytester: pytest.Pytester, stop: int
) -> None:
    """It printed a raw traceback, and neither the section nor a way on."""
    write_rows(pytester.path / "data.jsonl", tasks(6))
    with ScriptedAgent(aggregate=lambda body: Reply(json={}, delay=60)) as agent:
        with session(pytester.path, pytest_command(agent.url)) as proc:
            wait_for(lambda: bool(agent.aggregate_bodies), "the /aggregate_metrics request")
            os.killpg(proc.pid, stop)
            out, err = finish(proc)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert "= rollouts =" in out, out
    assert "Interrupted while scoring: no metrics file written; --rollouts-resume scores the run" in out, out
    assert_no_traceback(out, err)
    assert not (pytester.path / "out" / "r_aggregate_metrics.json").exists()
    with ScriptedAgent() as plain:
        resumed = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={plain.url}", "--rollouts-resume")
        assert plain.requests == [], "what has a row is not sent again"
    assert resumed.ret == pytest.ExitCode.OK
    assert (pytester.path / "out" / "r_aggregate_metrics.json").exists()


def test_ctrl_c_while_the_dispatcher_starts_up_leaves_it_quiet(pytester: pytest.Pytester) -> None:
    """Ctrl-C reached the dispatcher too, which died in its start-up with a traceback or
    ``Fatal Python error: init_import_site``. It is pytest's to decide when dispatch stops.

    A ``sitecustomize`` that takes a second holds the dispatcher's interpreter (not pytest's,
    which need not wait) in its site import, so the Ctrl-C sent as soon as it is started lands there."""
    site = pytester.mkdir("site")
    (site / "sitecustomize.py").write_text(
        "import sys, time\nif 'pytest_rollouts.dispatch.engine' in sys.orig_argv:\n    time.sleep(1.0)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))}
    pytester.makeconftest(
        FIND_ENGINE + "import pytest\n"
        "@pytest.hookimpl(trylast=True)\n"
        "def pytest_configure(config):\n"
        "    Path('engine.pid').write_text(str(engine_pid()))\n"
        "    os.killpg(os.getpgrp(), signal.SIGINT)\n"
    )
    write_rows(pytester.path / "data.jsonl", tasks(4))
    with ScriptedAgent() as agent:
        with session(pytester.path, pytest_command(agent.url), env) as proc:
            _, err = finish(proc)  # the dispatcher's output comes on this stderr too, until it ends
            [engine] = engines(pytester.path)
            wait_for(lambda: gone(engine), "the dispatcher process ended")
        assert agent.requests == []
    for mark in ("Fatal Python error", "pytest_rollouts/engine.py", "runpy"):
        assert mark not in err, err


def test_pytest_killed_during_health_checks_ends_the_dispatcher_at_once(pytester: pytest.Pytester) -> None:
    """It went on checking, then wrote to a pipe nobody read."""
    pytester.makeconftest(
        FIND_ENGINE + "def pytest_collection_finish(session):\n    Path('engine.pid').write_text(str(engine_pid()))\n"
    )
    write_rows(pytester.path / "data.jsonl", tasks(4))
    with ScriptedAgent(health=Reply(json={"status": "ok"}, delay=60)) as agent:
        with session(pytester.path, pytest_command(agent.url)) as proc:
            wait_for(lambda: agent.health_checks > 0, "a health check")
            proc.kill()
            _, err = finish(proc)  # stderr closes once the dispatcher, which shares it, has ended
        assert agent.requests == []
    assert_no_traceback(err)


def test_the_dispatcher_ends_quietly_when_pytest_stops_reading_mid_dispatch(tmp_path: Path) -> None:
    """Its second report to a pipe nobody read raised ``RuntimeError ... handler is closed``,
    printed as ``a bug in the dispatcher``: in about one kill of pytest in six."""
    rows = [b'{"responses_create_params": {"input": "q"}, "_ng_task_index": %d}' % i for i in range(400)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    engine = subprocess.Popen(
        [sys.executable, "-m", "pytest_rollouts.dispatch.engine"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
        env=env,
    )
    with ScriptedAgent(latency=0.02) as agent:
        dispatcher = one_rollout_dispatcher(tmp_path, rows, agent.url, parallel=4, process=engine)
        dispatcher.start()
        wait_for(lambda: agent.completed >= 8, "rollouts under way")
        assert engine.stdout is not None and engine.stdin is not None
        engine.stdout.close()  # pytest is gone as far as the dispatcher can tell: nobody reads
        try:
            code = engine.wait(timeout=BOUND_S)
        finally:
            engine.stdin.close()
            engine.kill()
        assert agent.completed < len(rows), "it stopped sending"
    assert engine.stderr is not None
    err = engine.stderr.read().decode()
    assert code == 0, err
    assert err == ""


def test_an_error_while_the_plan_goes_out_ends_the_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error before the whole plan was written (here injected; it was a value that passed
    validation and then overflowed the plan) left the dispatcher waiting for the rest of it and
    pytest waiting for its reply."""
    from pytest_rollouts.dispatch.channel import spawn_engine

    dispatch = importlib.import_module("pytest_rollouts.dispatch.channel")
    fired: list[int] = []
    spawned: list[subprocess.Popen[bytes]] = []

    def watched() -> subprocess.Popen[bytes]:
        proc = spawn_engine()
        spawned.append(proc)
        watchdog = threading.Timer(BOUND_S, lambda: (fired.append(proc.pid), proc.kill()))
        watchdog.daemon = True
        watchdog.start()
        return proc

    def broken_write(self: Any, data: bytes) -> None:
        raise ValueError("injected: the plan cannot be written")

    write_rows(pytester.path / "data.jsonl", tasks(4))
    with ScriptedAgent() as agent:
        monkeypatch.setattr(importlib.import_module("pytest_rollouts.pytest.session"), "spawn_engine", watched)
        monkeypatch.setattr(dispatch.Dispatcher, "_write", broken_write)
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
        assert agent.requests == []
    assert "injected: the plan cannot be written" in result.stdout.str() + result.stderr.str()
    assert fired == [], "the session hung until the watchdog killed the dispatcher"
    [proc] = spawned
    assert proc.poll() is not None
    assert Artifacts(pytester.path).materialized, "the plan was made; nothing was lost"


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_the_session_ends_under_xdist_prints_the_section(pytester: pytest.Pytester, stop: int) -> None:
    """Under -n, a stop right after the last item reported landed in xdist's wait for its workers
    to exit: a raw traceback, no section, no metrics, and pytest died of the signal. Any plugin's
    session end is such a place; here one takes a while on the controller, so the stop lands there."""
    pytester.makeconftest(
        "import time\n"
        "from pathlib import Path\n"
        "def pytest_sessionfinish(session):\n"
        "    if not hasattr(session.config, 'workerinput'):\n"
        "        Path('ending').touch()\n"
        "        time.sleep(3)\n"
    )
    write_rows(pytester.path / "data.jsonl", tasks(8))
    with ScriptedAgent() as agent:
        with session(pytester.path, pytest_command(agent.url, "-n", "2")) as proc:
            wait_for((pytester.path / "ending").exists, "the session's end")
            os.killpg(proc.pid, stop)
            out, err = finish(proc)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert "= rollouts =" in out, out
    assert "Interrupted while scoring: no metrics file written; --rollouts-resume scores the run" in out, out
    assert_no_traceback(out, err)


def test_a_stop_between_tries_spends_no_attempt(pytester: pytest.Pytester) -> None:
    """A rollout waiting out its retry backoff when the run was stopped got a failure row, which
    spends an attempt: three stopped runs gave it up for good, while each said '--rollouts-resume
    runs them'. It is unfinished, like one in flight: no row, and the resume sends it at attempt 0."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent(lambda row, seen: Reply(status=503)) as busy:
        command = [*pytest_command(busy.url), "--rollouts-retry-backoff=60"]
        with session(pytester.path, command) as proc:
            wait_for(lambda: len(busy.requests) == 3, "every rollout's first try")
            os.killpg(proc.pid, signal.SIGINT)
            out, err = finish(proc)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out + err
    files = Artifacts(pytester.path)
    assert not files.failures_path.exists() or files.failures == []
    with ScriptedAgent() as agent:
        resumed = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume")
        assert sorted(r.get("_ng_attempt_index", 0) for r in agent.requests) == [0, 0, 0]
    resumed.assert_outcomes(passed=3)
