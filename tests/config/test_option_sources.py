"""Where a setting comes from: ini, then the environment, then the command line.

A keyed repeatable option (agents by name, headers by agent and name, map and fan-out
keys) combines its sources, the stronger one overriding an entry with the same key;
within one source, one key given two values is a usage error naming that source.
"""

from __future__ import annotations

import pytest

from ..agents import ScriptedAgent
from ..helpers import run_rollouts, tasks, write_rows

ONE, TWO = "http://127.0.0.1:1", "http://127.0.0.1:2"


@pytest.mark.parametrize(
    ("ini", "args", "message"),
    [
        # The last one silently won.
        (
            "",
            [f"--rollouts-agent={ONE}", f"--rollouts-agent={TWO}"],
            f"--rollouts-agent: the default agent is given twice ({ONE} and {TWO})",
        ),
        (
            f"rollouts_agent =\n    {ONE}\n    {TWO}\n",
            [],
            f"ini rollouts_agent: the default agent is given twice ({ONE} and {TWO})",
        ),
        (
            "",
            [f"--rollouts-agent=b={ONE}", f"--rollouts-agent=b={TWO}"],
            f"--rollouts-agent: agent b is given twice ({ONE} and {TWO})",
        ),
        (
            "",
            ["--rollouts-agent-header=X-Key=one", "--rollouts-agent-header=x-key=two"],
            "--rollouts-agent-header: header x-key is given twice with different values (not shown)",
        ),
    ],
)
def test_one_key_given_two_values_in_one_source_is_a_usage_error(
    pytester: pytest.Pytester, ini: str, args: list[str], message: str
) -> None:
    pytester.makeini(f"[pytest]\n{ini}")
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_one_header_written_in_two_cases_with_one_value_is_accepted(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """It was refused as "given twice with different values", though the values were the same."""
    write_rows(pytester.path / "data.jsonl", tasks(1))
    args = ["--rollouts-agent-header=Authorization=tok", "--rollouts-agent-header=authorization=tok"]
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", *args)
    result.assert_outcomes(passed=1)
    sent = {name.lower(): value for name, value in agent.headers[-1].items()}
    assert sent["authorization"] == "tok"


def test_headers_from_ini_env_and_command_line_combine(
    pytester: pytest.Pytester, agent: ScriptedAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ini header was dropped as soon as the environment or the command line gave any."""
    pytester.makeini("[pytest]\nrollouts_agent_header =\n    X-Ini=from-ini\n    X-Over=ini\n")
    monkeypatch.setenv("ROLLOUTS_AGENT_HEADERS", "X-Env=from-env\nX-Over=env")
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-agent-header=x-over=cli")
    result.assert_outcomes(passed=1)
    sent = {name.lower(): value for name, value in agent.headers[-1].items()}
    assert (sent["x-ini"], sent["x-env"], sent["x-over"]) == ("from-ini", "from-env", "cli")


def test_a_named_agent_on_the_command_line_keeps_the_ini_default(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """Collection failed with "no default agent": the command line's agents replaced the ini's."""
    rows = tasks(2)
    rows[1]["agent_ref"] = {"name": "beta"}
    write_rows(pytester.path / "data.jsonl", rows)
    pytester.makeini(f"[pytest]\nrollouts_agent = {agent.url}\n")
    with ScriptedAgent() as beta:
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent=beta={beta.url}")
        result.assert_outcomes(passed=2)
        assert (len(agent.requests), len(beta.requests)) == (1, 1)


@pytest.mark.parametrize("option", ["agent_map", "fan_out"])
def test_the_command_line_overrides_only_the_ini_entry_with_the_same_key(
    pytester: pytest.Pytester, option: str
) -> None:
    """The ini entries for other keys were dropped, so the q row named an unknown agent."""
    rows = tasks(2)
    rows[0]["agent_ref"], rows[1]["agent_ref"] = {"name": "p"}, {"name": "q"}
    write_rows(pytester.path / "data.jsonl", rows)
    pytester.makeini(f"[pytest]\nrollouts_{option} =\n    p=a\n    q=a\n")
    with ScriptedAgent() as a, ScriptedAgent() as b:
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent=a={a.url}",
            f"--rollouts-agent=b={b.url}",
            f"--rollouts-{option.replace('_', '-')}=p=b",
        )
        result.assert_outcomes(passed=2)
        assert (a.keys(), b.keys()) == ([(1, 0)], [(0, 0)]), "q's row stays on a, p's moves to b"


def test_a_bad_entry_names_its_source_when_sources_combine(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nrollouts_agent_header = not a header sk-secret\n")
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={ONE}", "--rollouts-agent-header=X-Key=1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini rollouts_agent_header: an agent header looks like NAME=VALUE*"])
    assert "sk-secret" not in "\n".join(result.outlines + result.errlines)
