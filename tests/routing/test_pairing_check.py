"""A row whose agent does not pair with its resources server or environment server, as a NeMo Gym head
server's config pairs them, is refused before any request, naming its file and line."""

from __future__ import annotations

import pytest

from ..agents import ScriptedAgent
from ..helpers import port, run_rollouts, tasks, write_rows


def paired_config(math_port: int, code_port: int, episodes_port: int = 3) -> str:
    """Two agents, each fronting its own resources server; an environment server running on math_agent."""
    return f"""\
math_rs:
  resources_servers:
    math:
      host: 127.0.0.1
      port: 1
      datasets:
        - {{name: m, type: benchmark, jsonl_fpath: math.jsonl}}
code_rs:
  resources_servers:
    code: {{host: 127.0.0.1, port: 2}}
math_agent:
  responses_api_agents:
    simple_agent:
      host: 127.0.0.1
      port: {math_port}
      resources_server: {{type: resources_servers, name: math_rs}}
code_agent:
  responses_api_agents:
    simple_agent:
      host: 127.0.0.1
      port: {code_port}
      resources_server: {{type: resources_servers, name: code_rs}}
episodes:
  environment_servers:
    math_env:
      host: 127.0.0.1
      port: {episodes_port}
      agent_server: {{type: responses_api_agents, name: math_agent}}
"""


def refused(result: pytest.RunResult) -> pytest.LineMatcher:
    """A session refused as a usage error (exit 4): what it said."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    return result.stderr


def run_against(pytester: pytest.Pytester, state: dict[str, str], dataset: str, *args: str) -> pytest.RunResult:
    return run_rollouts(pytester, dataset, f"--rollouts-head-server={state['address']}", *args)


def test_a_row_whose_agent_fronts_another_resources_server_is_refused(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    rows = tasks(3)
    rows[0].update(task_source="math_rs")
    rows[1].update(task_source="math_rs", agent_ref={"name": "code_agent"})
    rows[2].update(task_source="code_rs", agent_ref={"name": "code_agent"})
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent() as math, ScriptedAgent() as code:
        state["yaml"] = paired_config(port(math.url), port(code.url))
        result = run_against(pytester, state, "data.jsonl")
        assert math.requests == [] and code.requests == []
        assert math.health_checks == code.health_checks == 0
    # The head server's pairing and the data disagree: a usage error, as a bad option is (it was exit 2).
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    refused(result).fnmatch_lines(
        [
            "*data.jsonl:2: agent 'code_agent' fronts resources server 'code_rs', but the row's task_source is "
            "resources server 'math_rs'*"
        ]
    )


def test_paired_rows_run(pytester: pytest.Pytester, head_server) -> None:
    _, state = head_server
    rows = tasks(2)
    rows[0].update(task_source="math_rs")
    rows[1].update(task_source="code_rs", agent_ref={"name": "code_agent"})
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent() as math, ScriptedAgent() as code, ScriptedAgent() as episodes:
        state["yaml"] = paired_config(port(math.url), port(code.url), port(episodes.url))
        run_against(pytester, state, "data.jsonl").assert_outcomes(passed=2)
        # math_agent's rows go through the environment server in front of it (see test_environment_routing).
        assert (math.keys(), episodes.keys(), code.keys()) == ([], [(0, 0)], [(1, 0)])


def test_a_row_of_a_resources_servers_dataset_must_run_on_an_agent_that_fronts_it(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    rows = tasks(2)
    rows[0]["agent_ref"] = {"name": "math_agent"}
    rows[1]["agent_ref"] = {"name": "code_agent"}
    write_rows(pytester.path / "math.jsonl", rows)
    with ScriptedAgent() as math, ScriptedAgent() as code:
        state["yaml"] = paired_config(port(math.url), port(code.url))
        result = run_against(pytester, state, "math.jsonl")
        assert math.requests == [] and code.requests == []
    refused(result).fnmatch_lines(
        [
            "*math.jsonl:2: agent 'code_agent' fronts resources server 'code_rs',"
            " but its dataset file belongs to resources server 'math_rs'*"
        ]
    )


def test_a_row_sent_to_an_environment_server_must_name_its_agent(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    rows = [
        {"task_id": {"taskset": "arith", "id": i}, "task_input": {"q": i}, "agent_ref": {"name": name}}
        for i, name in enumerate(["math_agent", "code_agent"])
    ]
    write_rows(pytester.path / "episodes.jsonl", rows)
    with ScriptedAgent() as math, ScriptedAgent() as code, ScriptedAgent() as episodes:
        state["yaml"] = paired_config(port(math.url), port(code.url), port(episodes.url))
        result = run_against(pytester, state, "episodes.jsonl", "--rollouts-agent-map=arith=episodes")
        assert episodes.requests == []
    refused(result).fnmatch_lines(
        [
            "*episodes.jsonl:2: row names agent 'code_agent', but environment server 'episodes' runs its rows "
            "on agent 'math_agent' (its agent_server)*"
        ]
    )


def test_the_python_api_refuses_it_too(
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,
    head_server,
) -> None:
    from pytest_rollouts import CollectionConfig, CollectionRefused, run

    _, state = head_server
    monkeypatch.chdir(tmp_path)
    rows = tasks(1)
    rows[0].update(task_source="math_rs", agent_ref={"name": "code_agent"})
    write_rows(tmp_path / "data.jsonl", rows)
    with ScriptedAgent() as math, ScriptedAgent() as code:
        state["yaml"] = paired_config(port(math.url), port(code.url))
        with pytest.raises(CollectionRefused, match=r"data\.jsonl:1: agent 'code_agent' fronts resources server"):
            run(CollectionConfig(input="data.jsonl", out="out/r.jsonl", head_server=state["address"]))
        assert math.requests == [] and code.requests == []


def test_a_dataset_listed_by_an_agent_runs_only_on_agents_of_that_agents_resources_server(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    """NeMo Gym's benchmarks list their datasets under their agent: the file's rows are verified by the
    resources server that agent fronts, so a map sending them to another resources server's agent is refused."""
    _, state = head_server
    write_rows(pytester.path / "code.jsonl", tasks(2))
    listed = "      datasets: [{name: c, type: benchmark, jsonl_fpath: code.jsonl}]\n"
    with ScriptedAgent() as math, ScriptedAgent() as code:
        extra = (
            f"extra:\n  responses_api_agents:\n    simple_agent:\n      host: 127.0.0.1\n      port: {port(code.url)}\n"
            "      resources_server: {type: resources_servers, name: code_rs}\n"
        )
        state["yaml"] = paired_config(port(math.url), port(code.url)) + extra + listed
        result = run_against(pytester, state, "code.jsonl", "--rollouts-agent-map=_default=math_agent")
        assert math.requests == [] and code.requests == []
    refused(result).fnmatch_lines(
        [
            "*code.jsonl:1: agent 'math_agent' fronts resources server 'math_rs', but its dataset file belongs "
            "to resources server 'code_rs'*"
        ]
    )


def test_a_legacy_row_is_checked_against_the_agent_its_server_runs_it_on(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    """Legacy routing sends the rows to the environment server, which runs them on its agent_server:
    that agent's resources server must be the one the row's dataset belongs to."""
    _, state = head_server
    write_rows(pytester.path / "math.jsonl", tasks(1))
    with ScriptedAgent() as math, ScriptedAgent() as code, ScriptedAgent() as episodes:
        state["yaml"] = paired_config(port(math.url), port(code.url), port(episodes.url))
        legacy = ("--rollouts-environment-routing-mode=legacy", "--rollouts-environment-server=episodes")
        run_against(pytester, state, "math.jsonl", *legacy).assert_outcomes(passed=1)
        state["yaml"] = state["yaml"].replace("name: math_agent}", "name: code_agent}")
        result = run_against(pytester, state, "math.jsonl", *legacy)
        assert len(episodes.requests) == 1 and math.requests == code.requests == []
    refused(result).fnmatch_lines(
        [
            "*math.jsonl:1: agent 'code_agent' (behind environment server 'episodes') fronts resources server "
            "'code_rs', but its dataset file belongs to resources server 'math_rs'*"
        ]
    )


def test_a_row_naming_an_environment_server_as_its_agent_is_told_the_agent_to_name(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    rows = tasks(1)
    rows[0]["agent_ref"] = {"name": "episodes"}
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent() as math, ScriptedAgent() as code, ScriptedAgent() as episodes:
        state["yaml"] = paired_config(port(math.url), port(code.url), port(episodes.url))
        result = run_against(pytester, state, "data.jsonl")
        assert episodes.requests == [] and math.requests == []
    refused(result).fnmatch_lines(
        ["*data.jsonl:1: row names environment server 'episodes' as its agent: name the agent it runs rows on*"]
    )
