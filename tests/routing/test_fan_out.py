"""A mixed dataset over several agents: agent_map, fan_out, per-agent repeats, task_source."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from ..agents import Reply, ScriptedAgent
from ..helpers import QUIET, Artifacts, keys, run_rollouts, tasks, write_rows


def _mixed_rows(n: int, agent: str | None = None) -> list[dict]:
    rows = tasks(n)
    if agent is not None:
        for row in rows:
            row["agent_ref"] = {"name": agent}
    return rows


def fan_out_run(pytester: pytest.Pytester, a: ScriptedAgent, b: ScriptedAgent, *args: str) -> pytest.RunResult:
    """A run of data.jsonl whose rows, all naming agent 'policy', fan out to agents a and b."""
    agents = (f"--rollouts-agent=a={a.url}", f"--rollouts-agent=b={b.url}")
    return run_rollouts(pytester, "data.jsonl", *agents, "--rollouts-fan-out=policy=a,b", *args)


def _metric_groups(pytester: pytest.Pytester) -> dict[str, dict]:
    entries = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    return {entry["agent_ref"]["name"]: entry for entry in entries}


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        ("judge=other", {"default": [(1, 0), (3, 0)], "judge": [], "other": [(0, 0), (2, 0)]}),
        ("_default=other", {"default": [], "judge": [(0, 0), (2, 0)], "other": [(1, 0), (3, 0)]}),
    ],
    ids=["named-agent", "rows-naming-none"],
)
def test_agent_map_moves_rows_to_another_agent(
    pytester: pytest.Pytester, mapping: str, expected: dict[str, list[tuple[int, int]]]
) -> None:
    rows = tasks(4)
    rows[0]["agent_ref"] = rows[2]["agent_ref"] = {"name": "judge"}
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent() as default, ScriptedAgent() as judge, ScriptedAgent() as other:
        servers = {"default": default, "judge": judge, "other": other}
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={default.url}",
            f"--rollouts-agent=judge={judge.url}",
            f"--rollouts-agent=other={other.url}",
            f"--rollouts-agent-map={mapping}",
        )
        result.assert_outcomes(passed=4)
        assert {name: sorted(server.keys()) for name, server in servers.items()} == expected
        assert all(r["agent_ref"] == {"name": name} for name, server in servers.items() for r in server.requests)


def test_fan_out_copies_rows_with_continuing_rollout_indices(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", _mixed_rows(3, agent="policy"))
    with ScriptedAgent() as a, ScriptedAgent() as b:
        result = fan_out_run(pytester, a, b, "-v", "--rollouts-repeats=a=2,_default=1")
        result.assert_outcomes(passed=6)
        result.stdout.fnmatch_lines(["*data.jsonl::task[[]0-a[]] PASSED*", "*data.jsonl::task[[]0-b[]] PASSED*"])
        assert sorted(a.keys()) == [(t, r) for t in range(3) for r in (0, 1)]
        assert sorted(b.keys()) == [(t, 2) for t in range(3)]
    artifacts = Artifacts(pytester.path)
    materialized = artifacts.materialized
    assert len(materialized) == 9 and len(set(keys(materialized))) == 9
    assert Counter(r["agent_ref"]["name"] for r in artifacts.rows) == {"a": 6, "b": 3}
    groups = _metric_groups(pytester)
    assert set(groups) == {"a", "b"}
    assert groups["a"]["coverage"]["expected"] == 6 and groups["b"]["coverage"]["expected"] == 3
    [b_repeat] = groups["b"]["repeat_level_metrics"]
    assert (b_repeat["_ng_rollout_index"], b_repeat["sample_count"], b_repeat["missing_count"]) == (0, 3, 0), (
        "b's one rollout per task (index 2) is its repeat 0"
    )


@pytest.mark.parametrize("workers", [None, "2"])
def test_an_unmatched_map_key_is_named_in_the_rollouts_section(
    pytester: pytest.Pytester, agent: ScriptedAgent, workers: str | None
) -> None:
    """It was a warning lost in pytest's warnings summary (and an error under -W error); under
    -n only the workers, which collect the rows, know it: they tell their controller."""
    write_rows(pytester.path / "data.jsonl", tasks(2))
    args = [
        "data.jsonl",
        f"--rollouts-agent={agent.url}",
        "--rollouts-agent-map=mth=default",
        "-W",
        "error:no collected row",
    ]
    if workers is None:
        result = run_rollouts(pytester, *args)
    else:
        result = pytester.runpytest_subprocess(*QUIET, "-n", workers, "--rollouts-out=out/r.jsonl", *args)
    result.assert_outcomes(passed=2)
    section = result.stdout.str().split("= rollouts =", 1)[1]
    assert section.count("no collected row is keyed 'mth' (--rollouts-agent-map / --rollouts-fan-out): a typo?") == 1


def test_a_map_key_typo_that_leaves_rows_unrouted_is_named(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """The rows' error said only that their task source names no agent, not that a map key was near it."""
    write_rows(pytester.path / "data.jsonl", [{**row, "task_source": "math_source"} for row in tasks(2)])
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent=a={agent.url}", "--rollouts-agent-map=math_src=a")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "data.jsonl:1: row's task_source 'math_source' names no agent *; --rollouts-agent-map key 'math_src' "
            "matches no row: did you mean 'math_source'?"
        ]
    )
    assert agent.requests == []


def test_dropping_a_map_key_that_matched_no_row_does_not_block_the_resume(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """The manifest recorded the unmatched key, so fixing the typo refused the resume as another run."""
    write_rows(pytester.path / "data.jsonl", tasks(2))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-agent-map=mth=default")
    again = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume")
    assert again.ret == pytest.ExitCode.OK, again.stdout.str() + again.stderr.str()


def test_resume_refuses_when_the_fan_out_was_dropped(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", _mixed_rows(2, agent="policy"))
    with ScriptedAgent() as a, ScriptedAgent() as b:
        fan_out_run(pytester, a, b, f"--rollouts-agent=policy={a.url}").assert_outcomes(passed=4)
        agents = (f"--rollouts-agent=a={a.url}", f"--rollouts-agent=b={b.url}", f"--rollouts-agent=policy={a.url}")
        again = run_rollouts(pytester, "data.jsonl", *agents, "--rollouts-resume")
        assert again.ret == pytest.ExitCode.USAGE_ERROR
        again.stderr.fnmatch_lines(["*fan_out: recorded {'policy': [[]'a', 'b'[]]}, now None*"])


def test_fanned_out_item_can_be_selected_by_agent(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", _mixed_rows(2, agent="policy"))
    with ScriptedAgent() as a, ScriptedAgent() as b:
        result = fan_out_run(pytester, a, b, "-k", "b")
        result.assert_outcomes(passed=2, deselected=2)
        assert a.requests == []
        assert sorted(b.keys()) == [(0, 1), (1, 1)]


def test_resume_after_fan_out_runs_only_the_failed_agent(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", _mixed_rows(2, agent="policy"))
    with ScriptedAgent() as a, ScriptedAgent(behaviour=lambda row, seen: Reply(status=500, json={"detail": "x"})) as b:
        first = fan_out_run(pytester, a, b, "--rollouts-retries=0")
        first.assert_outcomes(passed=2, failed=0)
        assert first.parseoutcomes().get("agent_run_error") == 2
    with ScriptedAgent() as a, ScriptedAgent() as b:
        again = fan_out_run(pytester, a, b, "--rollouts-retries=0", "--rollouts-resume")
        again.assert_outcomes(passed=4)
        assert a.requests == []
        assert sorted(b.keys()) == [(0, 1), (1, 1)]
        assert all(r["_ng_attempt_index"] == 1 for r in b.requests)


def test_per_agent_repeats_follow_each_rows_agent(pytester: pytest.Pytester) -> None:
    rows = tasks(4)
    rows[0]["agent_ref"] = rows[1]["agent_ref"] = {"name": "judge"}
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent() as default, ScriptedAgent() as judge:
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={default.url}",
            f"--rollouts-agent=judge={judge.url}",
            "--rollouts-repeats=judge=3,_default=2",
        )
        result.assert_outcomes(passed=4)
        assert sorted(judge.keys()) == [(t, r) for t in (0, 1) for r in range(3)]
        assert sorted(default.keys()) == [(t, r) for t in (2, 3) for r in range(2)]
    groups = _metric_groups(pytester)
    assert groups["judge"]["agent_metrics"]["num_repeats"] == 3
    assert groups["default"]["agent_metrics"]["num_repeats"] == 2


def test_task_source_rows_resolve_through_the_suite(pytester: pytest.Pytester) -> None:
    rows = tasks(3)
    for row in rows[:2]:
        row["task_source"] = "math_resources"
    write_rows(pytester.path / "suite" / "data.jsonl", rows)
    with ScriptedAgent() as main, ScriptedAgent() as math:
        (pytester.path / "suite" / "rollouts.toml").write_text(
            'datasets = ["data.jsonl"]\nagent = "main"\n'
            f'[agents.main]\nurl = "{main.url}"\n[agents.math]\nurl = "{math.url}"\n'
            '[task_sources]\nmath_resources = "math"\n'
        )
        result = run_rollouts(pytester, "suite")
        result.assert_outcomes(passed=3)
        assert sorted(math.keys()) == [(0, 0), (1, 0)]
        assert main.keys() == [(2, 0)]
        assert all(r["agent_ref"] == {"name": "math"} and r["task_source"] for r in math.requests)


def test_undeclared_task_source_stops_before_any_request(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    rows = tasks(2)
    rows[1]["task_source"] = "nowhere"
    write_rows(pytester.path / "data.jsonl", rows)
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*data.jsonl:2: row's task_source 'nowhere' names no agent*"])
    assert agent.requests == []


def test_fan_out_to_an_unknown_agent_stops_before_any_request(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    fan_out = "--rollouts-fan-out=_default=default,ghost"
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", fan_out)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*data.jsonl:1: row names unknown agent 'ghost' (routed from '_default')*"])
    assert agent.requests == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rollouts-fan-out=p=a,b", "--rollouts-agent-map=p=a"], "*p is both mapped*and fanned out*"),
        (["--rollouts-fan-out=p="], "*fan-out of p lists no agents*"),
        (["--rollouts-fan-out=p=a,"], "*fan-out of p has an empty agent name ('a,')*"),
        (["--rollouts-fan-out=p=a,b,a"], "*fan-out of p lists a more than once*"),
        (["--rollouts-fan-out=p=a", "--rollouts-fan-out=p=b"], "*fan-out of p is given twice*"),
        (["--rollouts-agent-map=p=a", "--rollouts-agent-map=p=b"], "*p is mapped twice (a and b)*"),
        (["--rollouts-repeats=a=2,a=3"], "*agent 'a' is given twice*"),
        (["--rollouts-repeats=ghost=2"], "*--rollouts-repeats names unknown agents: ghost*"),
    ],
)
def test_routing_conflicts_are_usage_errors(
    pytester: pytest.Pytester, agent: ScriptedAgent, args: list[str], message: str
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    result = run_rollouts(
        pytester, "data.jsonl", f"--rollouts-agent={agent.url}", f"--rollouts-agent=a={agent.url}", *args
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert agent.requests == []


def test_each_group_is_scored_by_its_own_server(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", _mixed_rows(3, agent="policy"))

    def metrics(value: float):
        def reply(body: dict) -> dict:
            return {"agent_metrics": {"mean/reward": value}, "key_metrics": {"mean/reward": value}}

        return reply

    with ScriptedAgent(aggregate=metrics(0.25)) as a, ScriptedAgent() as b:
        result = fan_out_run(pytester, a, b, "--rollouts-repeats=a=2,b=1")
        result.assert_outcomes(passed=6)
        [body] = a.aggregate_bodies
    assert sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in body["verify_responses"]) == [
        (t, r) for t in range(3) for r in (0, 1)
    ], "a's server gets a's rows only"
    assert {r["agent_ref"]["name"] for r in body["verify_responses"]} == {"a"}
    groups = _metric_groups(pytester)
    assert groups["a"]["metrics_source"] == "server" and groups["a"]["key_metrics"]["mean/reward"] == 0.25
    assert groups["b"]["metrics_source"] == "local", "b's server has no /aggregate_metrics"
    result.stdout.fnmatch_lines(["a: mean reward 0.2500 over 6 rollouts [[]server metrics[]]", "b: mean reward *"])


def test_the_default_agents_rows_map_under_its_name(pytester: pytest.Pytester) -> None:
    """Rows without agent_ref go to the suite's default agent; mapping that agent's name moves them."""
    write_rows(pytester.path / "suite" / "data.jsonl", tasks(2))
    with ScriptedAgent() as main, ScriptedAgent() as other:
        (pytester.path / "suite" / "rollouts.toml").write_text(
            f'datasets = ["data.jsonl"]\nagent = "main"\n[agents.main]\nurl = "{main.url}"\n'
        )
        result = run_rollouts(
            pytester, "suite", f"--rollouts-agent=other={other.url}", "--rollouts-agent-map=main=other", "-W", "error"
        )
        result.assert_outcomes(passed=2)
        assert main.requests == [] and sorted(other.keys()) == [(0, 0), (1, 0)]
