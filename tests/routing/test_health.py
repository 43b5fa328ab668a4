"""Health checks before dispatch, and agent headers that never leak."""

from __future__ import annotations

import base64
import json
import socket

import pytest

from pytest_rollouts.net.auth import Redactor

from ..agents import Reply, ScriptedAgent
from ..helpers import Artifacts, run_rollouts, tasks, write_rows

UNHEALTHY_EXIT = pytest.ExitCode.INTERRUPTED


def empty_metrics(body: dict) -> dict:
    """An ``/aggregate_metrics`` that answers (its headers are what a test looks at)."""
    return {"agent_metrics": {}, "key_metrics": {}, "group_level_metrics": [], "repeat_level_metrics": []}


def _two_agent_rows(pytester: pytest.Pytester) -> None:
    rows = tasks(4)
    rows[1]["agent_ref"] = rows[3]["agent_ref"] = {"name": "judge"}
    write_rows(pytester.path / "data.jsonl", rows)


def test_unhealthy_agent_stops_the_session_before_any_run(pytester: pytest.Pytester) -> None:
    _two_agent_rows(pytester)
    sick = Reply(status=503, json={"detail": "model not loaded"})
    with ScriptedAgent() as main, ScriptedAgent(health=sick) as judge:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={main.url}", f"--rollouts-agent=judge={judge.url}"
        )
        assert result.ret == UNHEALTHY_EXIT
        result.stdout.fnmatch_lines(
            [
                "*agents failed their health check; nothing was dispatched:*",
                f"*agent 'judge' at {judge.url}: HTTP 503: *model not loaded*",
            ]
        )
        assert main.requests == [] and judge.requests == []
        assert main.health_checks == 1 and judge.health_checks == 1
    assert not list(pytester.path.glob("out/r*")), "nothing written"


def test_a_refused_run_leaves_earlier_results_where_they_were(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """They were moved aside, and an empty output left in their place, by a run that sent nothing.
    The health check now comes before anything is moved: there is nothing to put back."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}").assert_outcomes(passed=3)
    before = {p.name: p.read_bytes() for p in (pytester.path / "out").glob("r*")}
    with ScriptedAgent(health=Reply(status=500)) as sick:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={sick.url}", "--rollouts-repeats=2")
    assert result.ret == UNHEALTHY_EXIT
    assert {p.name: p.read_bytes() for p in (pytester.path / "out").glob("r*")} == before
    assert "moved" not in result.stdout.str() and "back in place" not in result.stdout.str()
    assert not [p for p in (pytester.path / "out").iterdir() if "prev" in p.name]


def test_agent_that_refuses_connections_is_unhealthy(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    _two_agent_rows(pytester)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", f"--rollouts-agent=judge={dead}")
    assert result.ret == UNHEALTHY_EXIT
    result.stdout.fnmatch_lines([f"*agent 'judge' at {dead}: ClientConnectorError*"])
    assert agent.requests == []


def test_server_without_a_health_route_counts_as_healthy(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent(health=None) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
        result.assert_outcomes(passed=2)


def test_no_health_check_skips_the_check(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent(health=Reply(status=500)) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-no-health-check")
        result.assert_outcomes(passed=2)
        assert agent.health_checks == 0


def test_ignored_checks_do_not_stop_the_session(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    degraded = Reply(json={"status": "ok", "checks": {"judge_model": {"status": "fail"}, "db": "ok"}})
    with ScriptedAgent(health=degraded) as agent:
        refused = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
        assert refused.ret == UNHEALTHY_EXIT
        refused.stdout.fnmatch_lines(["*failing checks judge_model:*"])
        assert agent.requests == []
        allowed = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-health-ignore=judge_model"
        )
        allowed.assert_outcomes(passed=2)


def test_an_ignored_agent_is_not_checked(pytester: pytest.Pytester) -> None:
    _two_agent_rows(pytester)
    with ScriptedAgent() as main, ScriptedAgent(health=Reply(status=500)) as judge:
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={main.url}",
            f"--rollouts-agent=judge={judge.url}",
            "--rollouts-health-ignore=judge",
        )
        result.assert_outcomes(passed=4)
        assert judge.health_checks == 0 and main.health_checks == 1


def test_only_agents_that_rows_route_to_are_checked(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent(health=Reply(status=500)) as unused:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", f"--rollouts-agent=spare={unused.url}"
        )
        result.assert_outcomes(passed=2)
        assert unused.health_checks == 0


def test_agent_headers_are_sent_and_never_written(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "sk-test-0123456789abcdef"
    monkeypatch.setenv("AGENT_TOKEN", token)
    rows = tasks(2)
    rows[1]["agent_ref"] = {"name": "gated"}
    write_rows(pytester.path / "data.jsonl", rows)

    def refuse_with_echo(row: dict, seen: int) -> Reply:
        return Reply(status=401, json={"error": f"key {token} is not allowed here"})

    def echo_token(row: dict, seen: int) -> Reply:
        return Reply(json={"reward": 1.0, "debug": f"called with Bearer {token}"})

    with (
        ScriptedAgent(behaviour=echo_token, aggregate=empty_metrics) as main,
        ScriptedAgent(behaviour=refuse_with_echo) as gated,
    ):
        result = run_rollouts(
            pytester,
            "data.jsonl",
            "-v",
            f"--rollouts-agent={main.url}",
            f"--rollouts-agent=gated={gated.url}",
            "--rollouts-agent-header=Authorization=Bearer ${AGENT_TOKEN}",
            "--rollouts-agent-header=gated:X-Team=evals",
        )
        assert result.parseoutcomes().get("agent_run_error") == 1
        assert len(main.headers) == 3, "a health check, a /run and /aggregate_metrics"
        assert {h["Authorization"] for h in main.headers} == {f"Bearer {token}"}
        assert all("X-Team" not in h for h in main.headers)
        assert {(h["Authorization"], h["X-Team"]) for h in gated.headers} == {(f"Bearer {token}", "evals")}
        assert len(gated.headers) == 2, "one health check and one /run"
    [failure] = Artifacts(pytester.path).failures
    assert "[redacted]" in failure["_ng_failure_response_body"]
    [row] = Artifacts(pytester.path).rows
    assert row["debug"] == "called with [redacted]" and row["reward"] == 1.0
    written = b"".join(p.read_bytes() for p in (pytester.path / "out").iterdir() if p.is_file())
    shown = "\n".join(result.outlines + result.errlines)
    assert token not in shown and token.encode() not in written


def test_bad_header_is_a_usage_error_that_does_not_echo_it(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(
        pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-agent-header=not a header sk-secret"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rollouts-agent-header: *NAME=VALUE*"])
    assert "sk-secret" not in "\n".join(result.outlines + result.errlines)
    assert agent.requests == []


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("X-Key=sk-secret\nX-Other: 1", "*header X-Key: a value must be one line of printable latin-1 text*"),
        ("ghost:X-Key=sk-secret", "*--rollouts-agent-header names unknown agents: ghost*"),
    ],
)
def test_unusable_header_is_a_usage_error(
    pytester: pytest.Pytester, agent: ScriptedAgent, header: str, message: str
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", f"--rollouts-agent-header={header}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "sk-secret" not in "\n".join(result.outlines + result.errlines)
    assert agent.requests == []


@pytest.mark.parametrize("ini", [False, True])
def test_an_unknown_agent_in_headers_names_where_they_were_set(
    pytester: pytest.Pytester, agent: ScriptedAgent, monkeypatch: pytest.MonkeyPatch, ini: bool
) -> None:
    """Not the command-line option the user never typed."""
    if ini:
        pytester.makeini("[pytest]\nrollouts_agent_header = ghost:X-Key=sk-secret\n")
    else:
        monkeypatch.setenv("ROLLOUTS_AGENT_HEADERS", "ghost:X-Key=sk-secret")
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    where = "ini rollouts_agent_header" if ini else "env ROLLOUTS_AGENT_HEADERS"
    result.stderr.fnmatch_lines([f"*{where} names unknown agents: ghost*"])
    assert "sk-secret" not in "\n".join(result.outlines + result.errlines)
    assert agent.requests == []


def test_headers_from_the_environment_add_to_the_command_line(
    pytester: pytest.Pytester, agent: ScriptedAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUTS_AGENT_HEADERS", "X-Env-Key=from-env\n\ndefault:X-Scoped=scoped")
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(
        pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-agent-header=X-Cli=from-cli"
    )
    result.assert_outcomes(passed=1)
    [run] = [h for h in agent.headers if "X-Cli" in h][-1:]
    assert (run["X-Env-Key"], run["X-Scoped"], run["X-Cli"]) == ("from-env", "scoped", "from-cli")


def test_redaction_touches_strings_only() -> None:
    redact = Redactor({"a": {"X-Key": "12345678", "Authorization": "Bearer sk-abcdefgh"}})
    row = {"n": 12345678, "s": "id 12345678 and sk-abcdefgh", "l": [{"t": "Bearer sk-abcdefgh"}], "ok": "x"}
    assert redact.row(row) == {
        "n": 12345678,
        "s": "id [redacted] and [redacted]",
        "l": [{"t": "[redacted]"}],
        "ok": "x",
    }
    clean = {"reward": 1.0}
    assert redact.row(clean) is clean


def test_redaction_finds_values_an_agent_echoes_json_escaped() -> None:
    """An agent echoing its request headers with json.dumps escapes non-ASCII, quotes and backslashes."""
    secrets = {"X-Q": "p\u00e4ssw\u00f6rd42", "X-R": 'q"uo\\te1234'}
    redact = Redactor({"a": secrets})
    for echoed in (json.dumps(secrets), json.dumps(secrets, ensure_ascii=False)):
        assert redact(echoed) == '{"X-Q": "[redacted]", "X-R": "[redacted]"}'
        assert redact.row({"m": echoed}) == {"m": '{"X-Q": "[redacted]", "X-R": "[redacted]"}'}
        assert b"[redacted]" in redact.line({"m": echoed})


def test_a_long_health_reply_is_read_whole(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    checks = {f"check_{i:03d}": "ok" for i in range(200)} | {"zz_gpu": "fail"}
    with ScriptedAgent(health=Reply(json={"status": "ok", "checks": checks})) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
        assert result.ret == UNHEALTHY_EXIT
        result.stdout.fnmatch_lines(["*failing checks zz_gpu:*"])
        assert agent.requests == []


def test_a_redirecting_health_route_is_an_agent_that_answers(pytester: pytest.Pytester) -> None:
    """``/health`` redirected to ``/health/`` (FastAPI does): the server is up, and the client follows no redirect."""
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent(health=Reply(status=307, raw=b"")) as agent:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
        assert agent.health_checks == 1
    result.assert_outcomes(passed=2)


def test_credentials_in_an_agent_url_reach_every_request_it_gets(pytester: pytest.Pytester) -> None:
    """``http://user:password@host`` is Basic auth on the health check, ``/run`` and
    ``/aggregate_metrics`` alike, as aiohttp sent it."""
    write_rows(pytester.path / "data.jsonl", tasks(1))

    with ScriptedAgent(aggregate=empty_metrics) as agent:
        with_credentials = agent.url.replace("http://", "http://evals:s3cret%2Fpass@")
        run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={with_credentials}").assert_outcomes(passed=1)
        assert len(agent.headers) == 3, "a health check, a /run and /aggregate_metrics"
    expected = "Basic " + base64.b64encode(b"evals:s3cret/pass").decode()
    assert {h.get("Authorization") for h in agent.headers} == {expected}


def test_credentials_in_an_agent_url_are_never_shown_or_written(pytester: pytest.Pytester) -> None:
    """Neither the password nor the Basic value made of it: not in a failed health check's message,
    nor where an agent echoes its request headers (sidecar, terminal, junitxml)."""
    write_rows(pytester.path / "data.jsonl", tasks(2))
    basic = base64.b64encode(b"evals:hunter2-pass").decode()

    def echoes_headers(row: dict, seen: int) -> Reply:
        return Reply(status=500, json={"detail": f"refused {agent.headers[-1].get('Authorization')}"})

    def with_password(url: str) -> str:
        return url.replace("http://", "http://evals:hunter2-pass@")

    with ScriptedAgent(echoes_headers) as agent, ScriptedAgent(health=Reply(status=503)) as sick:
        echoed = run_rollouts(
            pytester, "data.jsonl", "--junitxml=j.xml", f"--rollouts-agent={with_password(agent.url)}"
        )
        refused = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={with_password(sick.url)}")
    assert echoed.parseoutcomes().get("agent_run_error") == 2
    refused.stdout.fnmatch_lines([f"*agent 'default' at {sick.url}: HTTP 503*"])
    shown = [echoed.stdout.str(), refused.stdout.str(), (pytester.path / "j.xml").read_text()]
    shown += [p.read_text() for p in (pytester.path / "out").glob("r*.json*")]
    assert all("hunter2" not in text and basic not in text for text in shown)
    assert "[redacted]" in (pytester.path / "out" / "r_failures.jsonl").read_text()
