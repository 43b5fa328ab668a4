"""Rows become items with readable, stable ids; nothing else in a test tree is touched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ..agents import ScriptedAgent
from ..helpers import QUIET, Artifacts, run_rollouts, tasks, write_rows


def test_each_row_is_an_item_with_a_readable_id(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--co", "-q")
    result.stdout.fnmatch_lines(
        ["data.jsonl::task[[]0[]]", "data.jsonl::task[[]1[]]", "data.jsonl::task[[]2[]]", "3 tests collected*"]
    )
    assert agent.requests == []
    assert not (pytester.path / "out").exists(), "--co must not write artifacts"


def test_blank_lines_are_skipped_and_ids_count_rows(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    path = write_rows(pytester.path / "data.jsonl", tasks(2))
    path.write_bytes(b"\n" + path.read_bytes().replace(b"\n", b"\n\n", 1))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--co", "-q")
    result.stdout.fnmatch_lines(["data.jsonl::task[[]0[]]", "data.jsonl::task[[]1[]]", "2 tests collected*"])


def test_k_selects_rows_and_only_those_are_sent(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(5))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "-k", "task[3]")
    result.assert_outcomes(passed=1, deselected=4)
    assert agent.keys() == [(3, 0)], "task indices stay those of the whole file under -k"
    assert [r["_ng_task_index"] for r in Artifacts(pytester.path).materialized] == [3]


def test_suite_declaration_collects_its_datasets_only(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    suite = pytester.path / "suites" / "math"
    write_rows(suite / "train.jsonl", tasks(2))
    write_rows(suite / "notes.jsonl", tasks(7))
    (suite / "rollouts.toml").write_text(
        f'datasets = ["train.jsonl"]\nagent = "math"\n[agents.math]\nurl = "{agent.url}"\n'
    )
    result = run_rollouts(pytester, "suites")
    result.assert_outcomes(passed=2)
    assert sorted(agent.keys()) == [(0, 0), (1, 0)]
    assert {r["agent_ref"]["name"] for r in Artifacts(pytester.path).rows} == {"math"}


def test_suite_runs_against_an_external_agent_given_on_the_command_line(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    suite = pytester.path / "suite"
    write_rows(suite / "data.jsonl", tasks(2))
    (suite / "rollouts.toml").write_text(
        'datasets = ["*.jsonl"]\nagent = "math"\n[agents.math]\nurl = "http://127.0.0.1:9"\n'
    )
    result = run_rollouts(pytester, "suite", f"--rollouts-agent={agent.url}")
    result.assert_outcomes(passed=2)
    assert len(agent.requests) == 2


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (None, "*cannot start an embedded agent (math): *suite/nofile.py: no such file*"),
        ("raise ImportError('no model here')\n", "*importing *suite/nofile.py failed: ImportError('no model here')*"),
    ],
)
def test_an_embedded_agent_that_cannot_start_names_its_file_and_leaves_results_alone(
    pytester: pytest.Pytester, source: str | None, message: str
) -> None:
    """Was "FileNotFoundError(2, 'No such file or directory')", naming nothing, after the earlier
    results had been moved aside."""
    suite = pytester.path / "suite"
    write_rows(suite / "data.jsonl", tasks(2))
    (suite / "rollouts.toml").write_text(
        'datasets = ["*.jsonl"]\nagent = "math"\n[agents.math]\nembedded = "nofile.py:app"\n'
    )
    if source is not None:
        (suite / "nofile.py").write_text(source)
    (pytester.path / "out").mkdir()
    (pytester.path / "out" / "r.jsonl").write_text('{"earlier": true}\n')
    result = run_rollouts(pytester, "suite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    result.stderr.no_fnmatch_line("*back in place*")  # refused before anything was moved
    assert (pytester.path / "out" / "r.jsonl").read_text() == '{"earlier": true}\n'
    assert not list((pytester.path / "out").glob("r.prev-*"))


def test_an_embedded_agent_module_is_importable_while_it_runs(pytester: pytest.Pytester) -> None:
    """A dataclass under postponed annotations looks its module up in sys.modules as it is made."""
    suite = pytester.path / "suite"
    write_rows(suite / "data.jsonl", tasks(2))
    (suite / "rollouts.toml").write_text('datasets = ["*.jsonl"]\nagent = "m"\n[agents.m]\nembedded = "agent.py:app"\n')
    (suite / "agent.py").write_text(
        "from __future__ import annotations\n"
        "from dataclasses import dataclass\n"
        "from aiohttp import web\n"
        "@dataclass\n"
        "class Config:\n"
        "    reward: float = 1.0\n"
        "async def run(request):\n"
        "    return web.json_response({'reward': Config().reward})\n"
        "def app():\n"
        "    application = web.Application()\n"
        "    application.router.add_post('/run', run)\n"
        "    return application\n"
    )
    run_rollouts(pytester, "suite").assert_outcomes(passed=2)


def test_jsonl_in_an_ordinary_tree_is_never_collected(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "fixtures" / "data.jsonl", tasks(2))
    pytester.makepyfile(test_plain="def test_ok():\n    pass\n")
    result = pytester.runpytest(*QUIET)
    result.assert_outcomes(passed=1)


def _modules_a_plain_session_imported(pytester: pytest.Pytester, *names: str) -> str:
    """Of ``names`` (and aiohttp), those a session of one plain test in ``pytester.path`` imported."""
    pytester.makepyfile(test_plain="def test_ok():\n    pass\n")
    probe = (
        "import sys, pytest\n"
        "code = pytest.main(['-q', '-p', 'no:cacheprovider', '.'])\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] == 'aiohttp' or m in {names!r})\n"
        "print('HEAVY', heavy, int(code))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], cwd=pytester.path, capture_output=True, text=True, timeout=120)
    return proc.stdout + proc.stderr


def test_inert_session_imports_no_machinery(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "fixtures" / "data.jsonl", tasks(2))
    names = ("pytest_rollouts.dispatch.channel", "pytest_rollouts.config.settings", "pytest_rollouts.pytest.session")
    assert "HEAVY [] 0" in _modules_a_plain_session_imported(pytester, *names)


# All a session without datasets may import of the plugin: its options table and its role (read
# as pytest configures), the reporter every session registers, the hookspecs. Every pytest run of
# every repository the plugin is installed in pays for what else it imports (the limit: 20 ms).
STARTUP_MODULES = frozenset(
    {
        "pytest_rollouts",
        "pytest_rollouts.config",
        "pytest_rollouts.datatype",
        "pytest_rollouts.hookspecs",
        "pytest_rollouts.option",
        "pytest_rollouts.options",
        "pytest_rollouts.options_statistics",
        "pytest_rollouts.plugin",
        "pytest_rollouts.pytest",
        "pytest_rollouts.pytest.role",
        "pytest_rollouts.pytest.stash",
        "pytest_rollouts.pytest.terminal",
    }
)
HEAVY_PACKAGES = ("aiohttp", "pydantic", "orjson", "yaml", "httptools", "uvloop", "multidict")


def _imported(cwd: Path, code: str, packages: tuple[str, ...]) -> tuple[set[str], int]:
    """The modules of ``packages`` a fresh interpreter had imported after ``code`` (which sets
    ``code``, an exit status), and that status."""
    probe = (
        f"{code}\n"
        f"ours = sorted(m for m in sys.modules if m.split('.')[0] in {packages!r})\n"
        "print('IMPORTED', json.dumps({'modules': ours, 'exit': int(code)}))\n"
    )
    found = _printed(cwd, probe, "IMPORTED")
    return set(found["modules"]), found["exit"]


def _printed(cwd: Path, code: str, tag: str) -> Any:
    """What a fresh interpreter running ``code`` (with json, sys and pytest imported) printed as JSON
    on a line starting with ``tag``."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import json, sys, pytest\n{code}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(f"{tag} ")]
    assert lines, proc.stdout + proc.stderr
    return json.loads(lines[0].removeprefix(f"{tag} "))


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_a_session_without_datasets_imports_only_the_startup_modules(
    pytester: pytest.Pytester, extra: tuple[str, ...]
) -> None:
    """Imported in every session, the reporter brought in tallies, scoring and the store (orjson),
    and the session's end the verdict's rules: 155 ms, then 28.8 ms."""
    pytester.makepyfile(test_plain="def test_ok():\n    pass\n")
    code = f"code = pytest.main(['-q', '-p', 'no:cacheprovider', *{extra!r}, '.'])"
    imported, status = _imported(pytester.path, code, ("pytest_rollouts", *HEAVY_PACKAGES))
    assert status == 0
    assert imported - STARTUP_MODULES == set()


def test_the_session_module_loads_neither_pydantic_nor_asyncio(pytester: pytest.Pytester) -> None:
    """A run starts its dispatcher process as it is made, before its settings are validated, so
    the dispatcher's start-up overlaps with pydantic's: the session's module loaded pydantic (the
    collection's checks of dataset names sat beside the settings' models) and asyncio (for the
    health check's refusal words), and a one-row run started its dispatcher 0.13 s CPU later."""
    code = "import pytest_rollouts.pytest.session\ncode = 0"
    imported, status = _imported(pytester.path, code, ("pydantic", "asyncio", "httptools"))
    assert status == 0
    assert imported == set()


# What a run of one row through an agent URL does not use: the in-process dispatch and the model
# agents (the health check asks without them), the comparison with a baseline, the mending of a
# resume's judged-invalid results.
UNUSED_BY_ONE_ROW = frozenset(
    {
        "pytest_rollouts.rows.judge_retry",
        "pytest_rollouts.dispatch.inprocess",
        "pytest_rollouts.dispatch.attempts",
        "pytest_rollouts.dispatch.model_runs",
        "pytest_rollouts.model.agent",
        "pytest_rollouts.scoring.compare_runs",
        "pytest_rollouts.scoring.regression",
        "pytest_rollouts.scoring.multiplicity",
    }
)


def test_a_one_row_run_imports_no_machinery_it_does_not_use(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """The health check went through an in-process dispatch (its attempts, model agents and
    tools), and the scoring imported the baseline comparison, in every run."""
    write_rows(pytester.path / "data.jsonl", tasks(1))
    args = ["-q", "-p", "no:cacheprovider", "data.jsonl", "--rollouts-out=out/r.jsonl", f"--rollouts-agent={agent.url}"]
    imported, status = _imported(pytester.path, f"code = pytest.main({args!r})", ("pytest_rollouts",))
    assert status == 0
    assert len(agent.requests) == 1
    assert imported & UNUSED_BY_ONE_ROW == set()
    # The dispatcher process runs attempts, but a model agent's only for a plan that has one.
    dispatcher, _ = _imported(pytester.path, "import pytest_rollouts.dispatch.engine\ncode = 0", ("pytest_rollouts",))
    assert dispatcher & {"pytest_rollouts.dispatch.model_runs", "pytest_rollouts.model.agent"} == set()


# The plugin's frozen dataclasses a one-row run may build: values a caller may use as keys, or that
# are a default (a dataclass field's must be hashable, an argument's immutable), and ``Role`` with its
# ``Controller``, plugins found by identity.
FROZEN_AT_ONE_ROW = frozenset(
    {
        "Option",
        "HeadDataset",
        "Endpoint",
        "ModelEndpoint",
        "ModelPlan",
        "RewardRange",
        "RowShaping",
        "Gate",
        "StatisticsOptions",
        "Role",
        "Controller",
    }
)


def test_a_one_row_run_builds_no_frozen_dataclass_that_need_not_be(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """CPython 3.11 compiles each generated method of each dataclass at every start, and a frozen
    one has two more (``__setattr__``, ``__delattr__``; ``datatype`` shares its ``__hash__``). One
    neither hashed nor a default would only refuse assignment."""
    write_rows(pytester.path / "data.jsonl", tasks(1))
    args = ["-q", "-p", "no:cacheprovider", "data.jsonl", "--rollouts-out=out/r.jsonl", f"--rollouts-agent={agent.url}"]
    code = (
        f"code = pytest.main({args!r})\n"
        "import dataclasses\n"
        "frozen = sorted(\n"
        "    name for module in list(sys.modules.values()) if module.__name__.startswith('pytest_rollouts')\n"
        "    for name, value in vars(module).items()\n"
        "    if isinstance(value, type) and value.__module__ == module.__name__ and dataclasses.is_dataclass(value)\n"
        "    and value.__dataclass_params__.frozen\n"
        ")\n"
        "print('FROZEN', json.dumps(frozen))\n"
    )
    frozen = _printed(pytester.path, code, "FROZEN")
    assert len(agent.requests) == 1
    assert set(frozen) - FROZEN_AT_ONE_ROW == set()


def test_scoring_is_loaded_while_pytest_waits_for_the_first_results(pytester: pytest.Pytester) -> None:
    """Imported at the session's end, scoring's modules came after the last result: at one row, most
    of the end. Loaded as pytest's first work while it waits for the dispatcher (the read-ahead's
    first step), they are there before the first result is reported."""
    write_rows(pytester.path / "data.jsonl", tasks(1))
    pytester.makeconftest(
        "import sys\n"
        "def pytest_runtest_logreport(report):\n"
        "    if report.when == 'call':\n"
        "        print('LOADED', 'pytest_rollouts.scoring.configured' in sys.modules)\n"
    )
    with ScriptedAgent(latency=0.3) as agent:  # a wait for the first result, however busy the machine
        result = pytester.runpytest_subprocess(
            *QUIET, "-s", "data.jsonl", "--rollouts-out=out/r.jsonl", f"--rollouts-agent={agent.url}"
        )
    result.stdout.fnmatch_lines(["*LOADED True*"])
    assert result.ret == 0


# What pytest's process need not load when its dispatcher process checks the agents' health.
UNUSED_BY_A_HEALTH_CHECK = (
    "asyncio",
    "ssl",
    "httptools",
    "pytest_rollouts.net.http1",
    "pytest_rollouts.dispatch.agents",
)


def test_a_one_row_run_loads_no_event_loop_in_pytests_process(pytester: pytest.Pytester) -> None:
    """The health check ran on an event loop of pytest's own: asyncio, ssl, httptools and the HTTP
    client, some 118 modules more than the dispatcher process, which has them loaded, needs. So did
    the run's ``/aggregate_metrics`` at the end (about 126 M instructions in every session). Both are
    asked of the dispatcher process now: none of them is loaded once the agents are cleared, nor
    when the session ends, and the server's metrics are the run's."""
    write_rows(pytester.path / "data.jsonl", tasks(1))
    metrics = {"agent_metrics": {"mean/reward": 0.25}, "key_metrics": {"mean/reward": 0.25}}
    with ScriptedAgent(aggregate=lambda body: metrics) as agent:
        args = ["-q", "-p", "no:cacheprovider", "data.jsonl", "--rollouts-out=out/r.jsonl"]
        args.append(f"--rollouts-agent={agent.url}")
        code = (
            "seen = {}\n"
            "before = set(sys.modules)\n"
            "class Probe:\n"
            "    @pytest.hookimpl(trylast=True)\n"
            "    def pytest_collection_finish(self):\n"
            f"        seen['cleared'] = [m for m in {UNUSED_BY_A_HEALTH_CHECK!r} if m in set(sys.modules) - before]\n"
            "    @pytest.hookimpl(trylast=True)\n"
            "    def pytest_unconfigure(self):\n"
            f"        seen['ended'] = [m for m in {UNUSED_BY_A_HEALTH_CHECK!r} if m in set(sys.modules) - before]\n"
            f"code = pytest.main({args!r}, plugins=[Probe()])\n"
            "print('SEEN', json.dumps(seen))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", f"import json, sys, pytest\n{code}"],
            cwd=pytester.path,
            capture_output=True,
            text=True,
            timeout=120,
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("SEEN ")]
    assert lines and proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(lines[0].removeprefix("SEEN ")) == {"cleared": [], "ended": []}
    assert agent.health_checks == 1
    assert len(agent.requests) == 1
    [body] = agent.aggregate_bodies
    assert [row["_ng_task_index"] for row in body["verify_responses"]] == [0]
    [group] = json.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_text())
    assert (group["metrics_source"], group["key_metrics"]) == ("server", {"mean/reward": 0.25})


def test_named_file_without_an_agent_is_a_clear_error(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*no default agent is set*--rollouts-agent*"])


def test_rows_naming_no_agent_with_only_named_agents_are_told_how_to_route_them(pytester: pytest.Pytester) -> None:
    """With only ``--rollouts-agent gpt=URL`` the message named no way to send such rows to gpt."""
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", "--rollouts-agent=gpt=http://127.0.0.1:9", "--co")
    result.stdout.fnmatch_lines(
        ["*no default agent is set*or send them to one agent with --rollouts-agent-map _default=NAME; agents: gpt)"]
    )
    routed = run_rollouts(
        pytester, "data.jsonl", "--rollouts-agent=gpt=http://127.0.0.1:9", "--rollouts-agent-map=_default=gpt", "--co"
    )
    assert routed.ret == 0
