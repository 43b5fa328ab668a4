"""Agents discovered from a NeMo Gym head server serving its config, the way Gym's own tools read it."""

from __future__ import annotations

import pytest

from pytest_rollouts.config.headserver import HeadServerError, config_agents

from ..agents import ScriptedAgent
from ..helpers import Artifacts, port, run_rollouts, tasks, write_rows


def _config_yaml(math_port: int, code_port: int) -> str:
    """A NeMo Gym global config: two agents, a resources server pinned to one, an environment server."""
    return f"""\
head_server: {{host: 127.0.0.1, port: 11000}}
math_rs:
  resources_servers:
    math:
      host: 127.0.0.1
      port: 1
      entrypoint: app.py
      datasets:
        - {{name: m, type: benchmark, agent: math_agent, jsonl_fpath: d.jsonl}}
math_agent:
  responses_api_agents:
    simple_agent:
      host: 127.0.0.1
      port: {math_port}
      entrypoint: app.py
      resources_server: {{type: resources_servers, name: math_rs}}
      model_server: {{type: responses_api_models, name: policy_model}}
code_agent:
  responses_api_agents:
    simple_agent: {{host: 127.0.0.1, port: {code_port}, entrypoint: app.py}}
policy_model:
  responses_api_models:
    vllm_model: {{host: 127.0.0.1, port: 2, entrypoint: app.py}}
"""


def test_rows_name_agents_the_head_server_knows(pytester: pytest.Pytester, head_server) -> None:
    hits, state = head_server
    rows = tasks(4)
    rows[0]["agent_ref"] = {"name": "math_agent"}
    rows[1]["agent_ref"] = {"name": "code_agent"}
    rows[2]["task_source"] = "math_rs"
    rows[3]["task_source"] = "code_agent"
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent() as math, ScriptedAgent() as code:
        state["yaml"] = _config_yaml(port(math.url), port(code.url))
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-head-server={state['address']}")
        result.assert_outcomes(passed=4)
        assert sorted(math.keys()) == [(0, 0), (2, 0)]
        assert sorted(code.keys()) == [(1, 0), (3, 0)]
    assert hits == ["/global_config_dict_yaml"], "read once per session"
    names = {r["_ng_task_index"]: r["agent_ref"]["name"] for r in Artifacts(pytester.path).rows}
    assert names == {0: "math_agent", 1: "code_agent", 2: "math_agent", 3: "code_agent"}


def test_agent_map_default_sends_plain_rows_to_a_discovered_agent(pytester: pytest.Pytester, head_server) -> None:
    _, state = head_server
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent() as math, ScriptedAgent() as code:
        state["yaml"] = _config_yaml(port(math.url), port(code.url))
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-head-server=http://{state['address']}",
            "--rollouts-agent-map=_default=code_agent",
        )
        result.assert_outcomes(passed=2)
        assert sorted(code.keys()) == [(0, 0), (1, 0)] and math.requests == []


def test_a_compressed_config_is_read_by_the_agents_http_client(pytester: pytest.Pytester, head_server) -> None:
    """Discovery goes through the one client to agents, which decodes what a proxy in front of the
    head server compresses (``http.client`` handed the gzip bytes to the JSON parser: a usage error)."""
    _, state = head_server
    rows = tasks(1)
    rows[0]["agent_ref"] = {"name": "math_agent"}
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent() as math:
        state["yaml"], state["encoding"] = _config_yaml(port(math.url), 2), "gzip"
        result = run_rollouts(pytester, "data.jsonl", f"--rollouts-head-server={state['address']}")
        result.assert_outcomes(passed=1)
        assert math.keys() == [(0, 0)]


def test_unknown_agent_lists_the_discovered_ones(pytester: pytest.Pytester, head_server) -> None:
    _, state = head_server
    rows = tasks(1)
    rows[0]["agent_ref"] = {"name": "mathagent"}
    write_rows(pytester.path / "data.jsonl", rows)
    state["yaml"] = _config_yaml(1, 2)
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-head-server={state['address']}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*unknown agent 'mathagent' (known agents: code_agent, math_agent)*"])


def test_unreachable_head_server_is_a_usage_error(pytester: pytest.Pytester, head_server) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", "--rollouts-head-server=127.0.0.1:1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cannot reach the NeMo Gym head server at http://127.0.0.1:1*"])


def test_task_source_resolution_rules() -> None:
    config = {
        "pinned_rs": {"resources_servers": {"t": {"datasets": [{"agent": "b"}, {"agent": "b"}]}}},
        "fronted_rs": {"resources_servers": {"t": {"datasets": [{"name": "x"}]}}},
        "ambiguous_rs": {"resources_servers": {"t": {"datasets": [{"agent": "a"}, {"agent": "b"}]}}},
        "a": {"responses_api_agents": {"s": {"host": "h", "port": 1, "resources_server": {"name": "fronted_rs"}}}},
        "b": {"responses_api_agents": {"s": {"port": 2}}},
        "not_a_server": 3,
    }
    found = config_agents(config)
    assert dict(found.agents) == {"a": "http://h:1", "b": "http://127.0.0.1:2"}
    assert dict(found.task_sources) == {"a": "a", "b": "b", "pinned_rs": "b", "fronted_rs": "a"}


def test_interpolated_addresses_are_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    """OmegaConf's to_yaml keeps ${...} as written; hosts and ports are where configs use them."""
    monkeypatch.setenv("AGENT_PORT", "12345")
    monkeypatch.delenv("NO_SUCH_HOST", raising=False)
    config = {
        "head_server": {"host": "10.1.2.3", "port": 11000},
        "a": {"responses_api_agents": {"s": {"host": "${head_server.host}", "port": "${oc.env:AGENT_PORT}"}}},
        "b": {"responses_api_agents": {"s": {"host": "${oc.env:NO_SUCH_HOST,127.0.0.1}", "port": 7}}},
    }
    assert dict(config_agents(config).agents) == {"a": "http://10.1.2.3:12345", "b": "http://127.0.0.1:7"}
    config["b"]["responses_api_agents"]["s"]["port"] = "${nowhere.port}"
    with pytest.raises(HeadServerError, match=r"b: port: cannot resolve \$\{nowhere.port\}"):
        config_agents(config)


def test_each_environment_servers_type_is_its_key_under_environment_servers() -> None:
    """NeMo Gym's ``server_types``: the first key of a server's ``environment_servers`` block, the value
    its rows are stamped ``_ng_result_type``; agents and resources servers have none."""
    config = {
        "env": {"environment_servers": {"legacy_agent": {"host": "127.0.0.1", "port": 1}}},
        "agent": {"responses_api_agents": {"simple_agent": {"host": "127.0.0.1", "port": 2}}},
    }
    assert config_agents(config).result_types == {"env": "legacy_agent"}
