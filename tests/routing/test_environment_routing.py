"""Environment routing modes (NeMo Gym's ``environment_routing_mode``): ``legacy`` sends every flat row to
the named environment server, stamped ``_ng_environment_server`` from materialization to result;
``taskset`` refuses flat rows; ``agent`` is the routing every other test runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import Artifacts, keys, port, run_rollouts, tasks, write_rows

LEGACY = ("--rollouts-environment-routing-mode=legacy", "--rollouts-environment-server=legacy_env")


def config(agent_port: int, server_port: int) -> str:
    """An agent, and an environment server that runs its rows on it."""
    return f"""\
math_agent:
  responses_api_agents:
    simple_agent: {{host: 127.0.0.1, port: {agent_port}}}
legacy_env:
  environment_servers:
    compat:
      host: 127.0.0.1
      port: {server_port}
      agent_server: {{type: responses_api_agents, name: math_agent}}
"""


def assert_labelled_as_nemo_gym_labels(run: Path) -> None:
    """The metrics file labels the environment server's entry as NeMo Gym does: the agent it binds, and the server."""
    metrics = orjson.loads((run / "out" / "r_aggregate_metrics.json").read_bytes())
    assert [(group["agent_ref"], group["_ng_environment_server"]) for group in metrics] == [
        ({"name": "math_agent"}, "legacy_env")
    ]


def fails_task_2_once(row: dict[str, Any], seen: int) -> Reply:
    if row["_ng_task_index"] == 2 and seen == 0:
        return Reply(status=500, json={"error": "boom"})
    return verifier(row, seen)


def test_legacy_mode_sends_every_flat_row_to_the_environment_server_and_stamps_it(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    rows = tasks(3)
    rows[0]["agent_ref"] = {"name": "math_agent"}
    write_rows(pytester.path / "data.jsonl", rows)
    artifacts = Artifacts(pytester.path)
    head = f"--rollouts-head-server={state['address']}"
    with ScriptedAgent() as agent, ScriptedAgent(fails_task_2_once) as server:
        state["yaml"] = config(port(agent.url), port(server.url))
        run_rollouts(pytester, "data.jsonl", head, *LEGACY)
        assert agent.requests == [] and sorted(server.keys()) == [(0, 0), (1, 0), (2, 0)]
        assert all(r["_ng_environment_server"] == "legacy_env" for r in server.requests)
        assert [r["_ng_environment_server"] for r in artifacts.materialized] == ["legacy_env"] * 3
        # A row naming no agent is stamped with the one the server runs it on (its agent_server).
        assert [r.get("agent_ref") for r in artifacts.materialized] == [{"name": "math_agent"}] * 3
        (failure,) = artifacts.failures
        assert (failure["_ng_task_index"], failure["_ng_environment_server"]) == (2, "legacy_env")
        run_rollouts(pytester, "data.jsonl", head, *LEGACY, "--rollouts-resume")
        assert agent.requests == [] and server.keys()[3:] == [(2, 0)]
        assert server.requests[3]["_ng_attempt_index"] == 1
    assert sorted(keys(artifacts.rows)) == [(0, 0), (1, 0), (2, 0)]
    assert {r["_ng_environment_server"] for r in artifacts.rows} == {"legacy_env"}
    assert [r.get("agent_ref") for r in sorted(artifacts.rows, key=lambda r: r["_ng_task_index"])] == [
        {"name": "math_agent"}
    ] * 3
    assert artifacts.failures[0]["agent_ref"] == {"name": "math_agent"}
    assert_labelled_as_nemo_gym_labels(pytester.path)


def test_legacy_mode_refuses_a_row_naming_another_agent_than_the_servers(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    rows = tasks(2)
    rows[1]["agent_ref"] = {"name": "code_agent"}
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent() as agent, ScriptedAgent() as server:
        state["yaml"] = config(port(agent.url), port(server.url)) + (
            f"code_agent:\n  responses_api_agents:\n    simple_agent: {{host: 127.0.0.1, port: {port(agent.url)}}}\n"
        )
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-head-server={state['address']}", *LEGACY)
        assert server.requests == [] and agent.requests == []
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*data.jsonl:2: row names agent 'code_agent', but environment server 'legacy_env' runs its rows on*"]
    )


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_taskset_mode_refuses_flat_rows_before_any_request(
    pytester: pytest.Pytester, agent: ScriptedAgent, xdist: tuple[str, ...]
) -> None:
    rows: list[dict[str, Any]] = [{"task_id": {"taskset": "arith", "id": 0}, "task_input": {"q": 0}}, *tasks(1)]
    write_rows(pytester.path / "data.jsonl", rows)
    result = run_rollouts(
        pytester,
        "data.jsonl",
        f"--rollouts-agent=episodes={agent.url}",
        "--rollouts-agent-map=arith=episodes",
        "--rollouts-environment-routing-mode=taskset",
        *xdist,
    )
    assert agent.requests == []
    # The option and the data disagree: a usage error, as a bad option is (it was exit 2).
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*data.jsonl:2: a flat row (no task_id.taskset and task_input) under environment*"])


@pytest.mark.parametrize(
    "args",
    [("--rollouts-environment-routing-mode=legacy",), ("--rollouts-environment-server=legacy_env",)],
)
def test_legacy_mode_and_its_server_come_together(
    pytester: pytest.Pytester, agent: ScriptedAgent, args: tuple[str, ...]
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and agent.requests == []
    result.stderr.fnmatch_lines(["*legacy sends every flat row to the server*give both, or neither*"])


def test_a_head_servers_config_sets_the_mode_and_an_option_wins_over_it(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    write_rows(pytester.path / "data.jsonl", tasks(2))
    head = f"--rollouts-head-server={state['address']}"
    with ScriptedAgent() as agent, ScriptedAgent() as server:
        modes = "environment_routing_mode: legacy\nenvironment_server_name: legacy_env\n"
        state["yaml"] = modes + config(port(agent.url), port(server.url))
        run_rollouts(pytester, "data.jsonl", head).assert_outcomes(passed=2)
        assert agent.requests == [] and sorted(server.keys()) == [(0, 0), (1, 0)]
        result = run_rollouts(pytester, "data.jsonl", head, "--rollouts-environment-routing-mode=taskset")
        result.stderr.fnmatch_lines(["*data.jsonl:1: a flat row*under environment routing mode 'taskset'*"])
        assert len(server.requests) == 2


def test_a_bad_mode_in_a_head_servers_config_is_a_usage_error(pytester: pytest.Pytester, head_server) -> None:
    _, state = head_server
    write_rows(pytester.path / "data.jsonl", tasks(1))
    with ScriptedAgent() as agent:
        state["yaml"] = "environment_routing_mode: flat\n" + config(port(agent.url), 1)
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-head-server={state['address']}")
        assert agent.requests == []
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*environment_routing_mode of the head server's config*'agent', 'legacy' or 'taskset'*"]
    )


def test_a_resume_refuses_another_routing_than_the_recorded_runs(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    write_rows(pytester.path / "data.jsonl", tasks(2))
    head = f"--rollouts-head-server={state['address']}"
    with ScriptedAgent() as agent, ScriptedAgent() as server:
        state["yaml"] = config(port(agent.url), port(server.url))
        run_rollouts(pytester, "data.jsonl", head, *LEGACY).assert_outcomes(passed=2)
        result = run_rollouts(
            pytester, "data.jsonl", head, "--rollouts-agent-map=_default=math_agent", "--rollouts-resume"
        )
        assert result.ret == pytest.ExitCode.USAGE_ERROR and agent.requests == []
    result.stderr.fnmatch_lines(["*environment_server: recorded 'legacy_env', now None*"])


def test_a_legacy_server_without_an_agent_server_leaves_rows_naming_none_as_they_are(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent=legacy_env={agent.url}", *LEGACY).assert_outcomes(passed=2)
    materialized = Artifacts(pytester.path).materialized
    assert [(r["_ng_environment_server"], r.get("agent_ref")) for r in materialized] == [("legacy_env", None)] * 2


def episode_server(body: dict[str, Any], seen: int) -> Reply:
    episode = {"episode_id": body["episode_id"], "task_id": body["task"]["task_id"]}
    return Reply(json={**episode, "result": {"reward": 1.0}})


def servers_yaml(**servers: ScriptedAgent) -> str:
    return "".join(
        f"{name}:\n  environment_servers:\n    episodes: {{host: 127.0.0.1, port: {port(server.url)}}}\n"
        for name, server in servers.items()
    )


def test_a_head_servers_environment_server_routes_send_tasksets_to_their_servers(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    rows = [{"task_id": {"taskset": name, "id": 0}, "task_input": {"q": 0}} for name in ("math_v1", "code_v1")]
    write_rows(pytester.path / "data.jsonl", rows)
    head = f"--rollouts-head-server={state['address']}"
    with ScriptedAgent(episode_server) as math_env, ScriptedAgent(episode_server) as code_env:
        routes = "environment_server_routes: {math_v1: math_env, code_v1: code_env}\n"
        state["yaml"] = routes + servers_yaml(math_env=math_env, code_env=code_env)
        run_rollouts(pytester, "data.jsonl", head).assert_outcomes(passed=2)
        assert [r["task"]["task_id"]["taskset"] for r in math_env.requests] == ["math_v1"]
        assert [r["task"]["task_id"]["taskset"] for r in code_env.requests] == ["code_v1"]
    results = sorted(Artifacts(pytester.path).rows, key=lambda r: r["_ng_task_index"])
    assert [r["_ng_environment_server"] for r in results] == ["math_env", "code_env"]


@pytest.mark.parametrize(
    ("routes", "status", "stream", "message"),
    [
        (
            "{math_v1: ghost_env}",
            pytest.ExitCode.INTERRUPTED,
            "stdout",
            "*data.jsonl:1: taskset 'math_v1' routes to environment server 'ghost_env', which is unknown*",
        ),
        (
            "[math_v1]",
            pytest.ExitCode.USAGE_ERROR,
            "stderr",
            "*environment_server_routes must map taskset names to environment server names*",
        ),
    ],
)
def test_a_head_servers_bad_environment_server_routes_are_refused_before_any_request(
    pytester: pytest.Pytester,
    head_server,
    routes: str,
    status: pytest.ExitCode,
    stream: str,
    message: str,
) -> None:
    _, state = head_server
    write_rows(pytester.path / "data.jsonl", [{"task_id": {"taskset": "math_v1", "id": 0}, "task_input": {}}])
    with ScriptedAgent(episode_server) as math_env:
        state["yaml"] = f"environment_server_routes: {routes}\n" + servers_yaml(math_env=math_env)
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-head-server={state['address']}")
        assert math_env.requests == []
    assert result.ret == status
    getattr(result, stream).fnmatch_lines([message])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_the_python_api_routes_as_the_head_servers_config_says(
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,
    head_server,
) -> None:
    from pytest_rollouts import CollectionConfig, run

    _, state = head_server
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(2))
    with ScriptedAgent() as agent, ScriptedAgent() as server:
        modes = "environment_routing_mode: legacy\nenvironment_server_name: legacy_env\n"
        state["yaml"] = modes + config(port(agent.url), port(server.url))
        result = run(CollectionConfig(input="data.jsonl", out="out/r.jsonl", head_server=state["address"]))
        assert agent.requests == [] and sorted(server.keys()) == [(0, 0), (1, 0)]
    assert result.exit_status == 0
    rows = Artifacts(tmp_path).rows
    assert {(r["_ng_environment_server"], r["agent_ref"]["name"]) for r in rows} == {("legacy_env", "math_agent")}


def test_agent_mode_sends_an_agents_rows_through_the_environment_server_in_front_of_it(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    """NeMo Gym's agent routing resolves a flat row's agent to the one environment server in front of it
    (``_environment_server_for_agent``) at dispatch: the row goes there as materialized, unstamped and
    naming the agent (NeMo Gym stamps ``_ng_environment_server`` on materialized rows only in legacy and
    taskset modes, and its resume looks a stamp up in its own config), its result and failure rows are
    stamped with the server, and it is scored in the server's group."""
    _, state = head_server
    rows = tasks(3)
    rows[0]["agent_ref"] = {"name": "math_agent"}
    write_rows(pytester.path / "data.jsonl", rows)
    args = (f"--rollouts-head-server={state['address']}", "--rollouts-agent-map=_default=math_agent")
    with ScriptedAgent() as agent, ScriptedAgent(fails_task_2_once) as server:
        state["yaml"] = config(port(agent.url), port(server.url))
        run_rollouts(pytester, "data.jsonl", *args, "--rollouts-repeats=math_agent=2")
        assert agent.requests == [] and len(server.requests) == 6
        assert {(r.get("_ng_environment_server"), r["agent_ref"]["name"]) for r in server.requests} == {
            (None, "math_agent")
        }
        assert not any("_ng_environment_server" in r for r in Artifacts(pytester.path).materialized)
        run_rollouts(pytester, "data.jsonl", *args, "--rollouts-repeats=math_agent=2", "--rollouts-resume")
        assert agent.requests == [] and server.keys()[6:] == [(2, 0), (2, 1)]
    artifacts = Artifacts(pytester.path)
    assert sorted(keys(artifacts.rows)) == [(t, r) for t in range(3) for r in range(2)]
    assert {(r["_ng_environment_server"], r["agent_ref"]["name"]) for r in artifacts.rows} == {
        ("legacy_env", "math_agent")
    }
    assert artifacts.failures[0]["_ng_environment_server"] == "legacy_env"
    assert_labelled_as_nemo_gym_labels(pytester.path)


def test_an_agent_behind_several_environment_servers_cannot_route_a_row_by_its_agent(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    rows = tasks(2)
    rows[1]["agent_ref"] = {"name": "math_agent"}
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent() as agent, ScriptedAgent() as server:
        other = f"other_env:\n  environment_servers:\n    compat: {{host: 127.0.0.1, port: {port(server.url)}, "
        state["yaml"] = config(port(agent.url), port(server.url)) + other + "agent_server: math_agent}\n"
        head = f"--rollouts-head-server={state['address']}"
        result = run_rollouts(pytester, "data.jsonl", head, f"--rollouts-agent={agent.url}")
        assert agent.requests == [] and server.requests == []
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*data.jsonl:2: agent 'math_agent' is behind several environment servers (legacy_env, other_env)*"]
    )


def test_legacy_rows_are_counted_by_the_agent_their_server_runs_them_on(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent() as agent, ScriptedAgent() as server:
        state["yaml"] = config(port(agent.url), port(server.url))
        head = f"--rollouts-head-server={state['address']}"
        run_rollouts(pytester, "data.jsonl", head, *LEGACY, "--rollouts-repeats=math_agent=3,legacy_env=2")
        assert sorted(server.keys()) == [(t, r) for t in range(2) for r in range(3)]


def test_a_server_given_alone_overrides_the_head_servers_and_needs_its_legacy_mode(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    write_rows(pytester.path / "data.jsonl", tasks(1))
    head = f"--rollouts-head-server={state['address']}"
    with ScriptedAgent() as agent, ScriptedAgent() as server, ScriptedAgent() as other:
        other_env = f"other_env:\n  environment_servers:\n    compat: {{host: 127.0.0.1, port: {port(other.url)}}}\n"
        modes = "environment_routing_mode: legacy\nenvironment_server_name: legacy_env\n"
        state["yaml"] = modes + config(port(agent.url), port(server.url)) + other_env
        run_rollouts(pytester, "data.jsonl", head, "--rollouts-environment-server=other_env").assert_outcomes(passed=1)
        assert len(other.requests) == 1 and server.requests == []
        state["yaml"] = config(port(agent.url), port(server.url)) + other_env
        result = run_rollouts(pytester, "data.jsonl", head, "--rollouts-environment-server=other_env")
        assert result.ret == pytest.ExitCode.USAGE_ERROR and len(other.requests) == 1
    result.stderr.fnmatch_lines(["*legacy sends every flat row to the server*give both, or neither*"])


def test_an_agent_given_its_address_on_the_command_line_takes_its_rows_itself(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    _, state = head_server
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent() as agent, ScriptedAgent() as server, ScriptedAgent() as local:
        state["yaml"] = config(port(agent.url), port(server.url))
        head = f"--rollouts-head-server={state['address']}"
        args = (head, "--rollouts-agent-map=_default=math_agent", f"--rollouts-agent=math_agent={local.url}")
        run_rollouts(pytester, "data.jsonl", *args).assert_outcomes(passed=2)
        assert len(local.requests) == 2 and server.requests == [] and agent.requests == []
    # Sent to the agent, not through a server: no server's stamp, and no server type (``_ng_result_type``).
    assert all(
        "_ng_environment_server" not in row and "_ng_result_type" not in row for row in Artifacts(pytester.path).rows
    )
