"""Splits (NeMo Gym's ``split: train | validation | benchmark``): declared per dataset by a suite's
``rollouts.toml`` or a head server's config, picked by ``--rollouts-split``, recorded in the
manifest and the metrics file, and ``example`` refused with the way to run one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from pytest_rollouts import CollectionConfig, CollectionRefused, run_from_config

from ..agents import ScriptedAgent
from ..helpers import Artifacts, port, run_rollouts, tasks, write_rows

SUITE = """\
# The benchmark split is what a run takes unless asked for another.
agent = "policy"

[agents.policy]
url = "{url}"

[splits]
train = ["train.jsonl"]
benchmark = ["bench.jsonl"]
example = ["example.jsonl"]
"""


def _suite(root: Path, url: str) -> Path:
    """A suite whose three files have 3 (train), 2 (benchmark) and 1 (example) rows."""
    suite = root / "suite"
    suite.mkdir()
    (suite / "rollouts.toml").write_text(SUITE.format(url=url))
    for name, n in (("train", 3), ("bench", 2), ("example", 1)):
        write_rows(suite / f"{name}.jsonl", [{**row, "file": name} for row in tasks(n)])
    return suite


def _manifest(root: Path) -> dict:
    return orjson.loads((root / "out/r_run_manifest.json").read_bytes())


def _sent_files(agent: ScriptedAgent) -> set[str]:
    return {request["file"] for request in agent.requests}


def test_a_suite_runs_its_benchmark_split_unless_asked_and_records_it(pytester: pytest.Pytester) -> None:
    with ScriptedAgent() as agent:
        _suite(pytester.path, agent.url)
        result = run_rollouts(pytester, "suite")
        result.assert_outcomes(passed=2)
        assert _sent_files(agent) == {"bench"}
    manifest = _manifest(pytester.path)
    assert manifest["split"] == "benchmark"
    assert [(d["path"], d["split"]) for d in manifest["datasets"]] == [("suite/bench.jsonl", "benchmark")]
    metrics = orjson.loads((pytester.path / "out/r_aggregate_metrics.json").read_bytes())
    assert [entry["split"] for entry in metrics] == ["benchmark"]


def test_the_split_asked_for_is_the_one_collected(pytester: pytest.Pytester) -> None:
    with ScriptedAgent() as agent:
        _suite(pytester.path, agent.url)
        result = run_rollouts(pytester, "suite", "--rollouts-split=train")
        result.assert_outcomes(passed=3)
        assert _sent_files(agent) == {"train"}
    assert _manifest(pytester.path)["split"] == "train"


def test_a_resume_with_another_split_is_refused_and_sends_nothing(pytester: pytest.Pytester) -> None:
    with ScriptedAgent() as agent:
        _suite(pytester.path, agent.url)
        run_rollouts(pytester, "suite", "--rollouts-split=train").assert_outcomes(passed=3)
        agent.requests.clear()
        result = run_rollouts(pytester, "suite", "--rollouts-split=benchmark", "--rollouts-resume")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*the input changed*", "*split: recorded train, now benchmark*"])
        assert agent.requests == []


def test_the_example_split_is_refused_with_the_way_to_run_one(pytester: pytest.Pytester) -> None:
    """As NeMo Gym's ``_reject_example_split``: the recipe, not a bare list of allowed values."""
    with ScriptedAgent() as agent:
        _suite(pytester.path, agent.url)
        result = run_rollouts(pytester, "suite", "--rollouts-split=example")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*--rollouts-split*example is not a split*smoke-test samples*name its file*"])
        assert "Traceback" not in result.stderr.str()
        assert agent.requests == []


def test_an_example_file_named_on_its_own_runs(pytester: pytest.Pytester) -> None:
    with ScriptedAgent() as agent:
        _suite(pytester.path, agent.url)
        run_rollouts(pytester, "suite/example.jsonl").assert_outcomes(passed=1)
        assert _sent_files(agent) == {"example"}
    assert _manifest(pytester.path)["split"] == "example"


def test_a_file_of_another_split_than_the_one_asked_is_refused_naming_its_declaration(
    pytester: pytest.Pytester,
) -> None:
    with ScriptedAgent() as agent:
        _suite(pytester.path, agent.url)
        result = run_rollouts(pytester, "suite/train.jsonl", "--rollouts-split=benchmark")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        said = "*suite/train.jsonl is declared in the train split (suite/rollouts.toml:8), but the run asks for bench*"
        result.stderr.fnmatch_lines([said])
        assert agent.requests == []


def test_a_head_servers_datasets_are_collected_by_their_type(pytester: pytest.Pytester, head_server) -> None:
    """NeMo Gym's ``datasets: [{type, jsonl_fpath}]``: with a head server, ``pytest`` collects the files
    its config lists in the run's split, benchmark unless asked."""
    _, state = head_server
    write_rows(pytester.path / "data/train.jsonl", [{**row, "file": "train"} for row in tasks(3)])
    write_rows(pytester.path / "data/bench.jsonl", [{**row, "file": "bench"} for row in tasks(2)])
    with ScriptedAgent() as agent:
        state["yaml"] = f"""\
math_agent:
  responses_api_agents:
    simple_agent:
      host: 127.0.0.1
      port: {port(agent.url)}
      datasets:
        - {{name: m_train, type: train, jsonl_fpath: data/train.jsonl}}
        - {{name: m_bench, type: benchmark, jsonl_fpath: data/bench.jsonl}}
"""
        head = f"--rollouts-head-server={state['address']}"
        run_rollouts(pytester, head, "--rollouts-agent-map=_default=math_agent").assert_outcomes(passed=2)
        assert _sent_files(agent) == {"bench"}
        assert _manifest(pytester.path)["split"] == "benchmark"
        agent.requests.clear()
        run_rollouts(
            pytester, head, "--rollouts-agent-map=_default=math_agent", "--rollouts-split=train"
        ).assert_outcomes(passed=3)
        assert _sent_files(agent) == {"train"}
        assert _manifest(pytester.path)["split"] == "train"
        agent.requests.clear()
        (pytester.path / "data/bench.jsonl").unlink()
        result = run_rollouts(pytester, head, "--rollouts-agent-map=_default=math_agent")
        assert result.ret == pytest.ExitCode.USAGE_ERROR and agent.requests == []
        result.stderr.fnmatch_lines(["*the head server's config lists datasets that are not on disk: 'm_bench'*"])


def test_a_file_named_beside_its_suites_directory_runs(pytester: pytest.Pytester) -> None:
    """pytest drops an argument inside another from its initial paths; the file named still runs."""
    with ScriptedAgent() as agent:
        _suite(pytester.path, agent.url)
        run_rollouts(pytester, "suite/train.jsonl", "suite").assert_outcomes(passed=5)
        assert _sent_files(agent) == {"train", "bench"}


@pytest.mark.parametrize("where", ["suite", "head server", "head server, found in a directory", "two templates"])
def test_a_file_declared_in_two_splits_is_refused_naming_both(
    pytester: pytest.Pytester,
    head_server,
    where: str,
) -> None:
    _, state = head_server
    with ScriptedAgent() as agent:
        suite = _suite(pytester.path, agent.url)
        if where == "suite":
            toml = suite / "rollouts.toml"
            toml.write_text(toml.read_text().replace('train = ["train.jsonl"]', 'train = ["*.jsonl"]'))
            result = run_rollouts(pytester, "suite/bench.jsonl")
            said = "*suite/rollouts.toml:9: bench.jsonl is declared in the train and the benchmark splits*"
        else:
            (suite / "rollouts.toml").unlink()
            two = (("b", "benchmark", "p.yaml"), ("t", "benchmark" if where == "two templates" else "train", "q.yaml"))
            entries = "".join(
                f"        - {{name: {name}, type: {split}, jsonl_fpath: suite/bench.jsonl, prompt_config: {prompt}}}\n"
                for name, split, prompt in two
            )
            state["yaml"] = (
                "math_agent:\n  responses_api_agents:\n    simple_agent:\n      host: 127.0.0.1\n"
                f"      port: {port(agent.url)}\n      datasets:\n{entries}"
            )
            head = f"--rollouts-head-server={state['address']}"
            named = () if where == "head server, found in a directory" else ("suite/bench.jsonl",)
            result = run_rollouts(pytester, *named, head, "--rollouts-agent-map=_default=math_agent")
            said = "*lists suite/bench.jsonl as benchmark (dataset 'b') and train (dataset 't'); a dataset belongs*"
            if where == "two templates":
                said = "*gives suite/bench.jsonl two prompt templates, p.yaml (dataset 'b') and q.yaml (dataset 't')*"
        assert result.ret != pytest.ExitCode.OK and agent.requests == []
        result.stdout.fnmatch_lines([said])
        assert "Traceback" not in result.stdout.str() + result.stderr.str() and "_hooks.py" not in result.stdout.str()


def test_the_python_api_reads_a_suites_splits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with ScriptedAgent() as agent:
        _suite(tmp_path, agent.url)
        given = {"input": "suite", "out": "out/r.jsonl"}
        result = asyncio.run(run_from_config(CollectionConfig(**given, split="train")))
        assert result.exit_status == 0 and _sent_files(agent) == {"train"}
        assert _manifest(tmp_path)["split"] == "train"
        with pytest.raises(ValueError, match="split: example is not a split a run asks for"):
            CollectionConfig(**given, split="example")
        agent.requests.clear()
        with pytest.raises(CollectionRefused, match="split: recorded train, now benchmark"):
            asyncio.run(run_from_config(CollectionConfig(**given, split="benchmark", resume=True)))
        assert agent.requests == []
    assert Artifacts(tmp_path).rows
