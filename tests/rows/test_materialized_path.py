"""``--rollouts-materialized PATH`` (NeMo Gym's ``materialized_jsonl_fpath``): the materialized
inputs written elsewhere, the place recorded in the manifest, so a resume, ``aggregate`` and the
next fresh run find them with no option."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_rollouts import CollectionConfig, run_from_config

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import QUIET, Artifacts, aggregate, keys, read_rows, run_rollouts, tasks, write_rows


def _task_1_fails_once() -> Any:
    failed: set[int] = set()

    def behaviour(row: dict[str, Any], seen: int) -> Reply:
        if row["_ng_task_index"] == 1 and 1 not in failed:
            failed.add(1)
            return Reply(status=500)
        return verifier(row, seen)

    return behaviour


def test_the_inputs_go_where_asked_and_a_resume_finds_them_unasked(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent(_task_1_fails_once()) as agent:
        args = ("data.jsonl", f"--rollouts-agent={agent.url}")
        first = run_rollouts(pytester, *args, "--rollouts-materialized=inputs/m.jsonl")
        assert first.parseoutcomes() == {"passed": 2, "agent_run_error": 1}
        assert not Artifacts(pytester.path).materialized_path.exists()
        assert keys(read_rows(pytester.path / "inputs/m.jsonl")) == [(0, 0), (1, 0), (2, 0)]
        manifest = orjson.loads((pytester.path / "out/r_run_manifest.json").read_bytes())
        assert manifest["materialized"] == "../inputs/m.jsonl", "relative to the manifest"
        assert "artifacts: out/r.jsonl, out/r_failures.jsonl, inputs/m.jsonl" in first.stdout.str()
        agent.requests.clear()
        run_rollouts(pytester, *args, "--rollouts-resume").assert_outcomes(passed=3)
        assert [(r["_ng_task_index"], r["_ng_attempt_index"]) for r in agent.requests] == [(1, 1)]


def test_aggregate_finds_the_inputs_the_manifest_records(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent() as agent:
        run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-materialized=inputs/m.jsonl"
        ).assert_outcomes(passed=3)
    done = aggregate(pytester.path, "--input", "out/r.jsonl", "--out", "merged/all.jsonl", "--require-complete")
    assert done.returncode == 0, done.stderr
    assert keys(read_rows(pytester.path / "merged/all_materialized_inputs.jsonl")) == [(0, 0), (1, 0), (2, 0)]
    [group] = json.loads((pytester.path / "merged/all_aggregate_metrics.json").read_text())
    assert group["coverage"]["completed"] == 3


def test_a_fresh_run_moves_the_earlier_inputs_aside_with_their_results(pytester: pytest.Pytester) -> None:
    """The earlier set keeps its inputs beside its outputs, so it can still be scored or resumed."""
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent() as agent:
        args = ("data.jsonl", f"--rollouts-agent={agent.url}")
        run_rollouts(pytester, *args, "--rollouts-materialized=inputs/m.jsonl").assert_outcomes(passed=2)
        run_rollouts(pytester, *args).assert_outcomes(passed=2)
    [earlier] = (pytester.path / "out").glob("r.prev-*")
    assert keys(read_rows(earlier / "r_materialized_inputs.jsonl")) == [(0, 0), (1, 0)]
    assert not (pytester.path / "inputs/m.jsonl").exists()
    assert keys(Artifacts(pytester.path).materialized) == [(0, 0), (1, 0)], "the new run's, beside its output"
    done = aggregate(pytester.path, "--input", str(earlier / "r.jsonl"), "--out", "again/r.jsonl", "--require-complete")
    assert done.returncode == 0, done.stderr


def test_a_path_that_is_another_of_the_runs_files_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(
        pytester, "data.jsonl", "--rollouts-agent=http://127.0.0.1:1", "--rollouts-materialized=out/r_failures.jsonl"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rollouts-materialized names one of the run's other files*"])
    result = run_rollouts(
        pytester, "data.jsonl", "--rollouts-agent=http://127.0.0.1:1", "--rollouts-materialized=m.txt"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rollouts-materialized*must name a file, <name>.jsonl*"])


def test_the_python_api_moves_and_finds_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(3))
    with ScriptedAgent(_task_1_fails_once()) as agent:
        given = {"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"policy": agent.url}}
        asyncio.run(run_from_config(CollectionConfig(**given, materialized="inputs/m.jsonl")))
        assert keys(read_rows(tmp_path / "inputs/m.jsonl")) == [(0, 0), (1, 0), (2, 0)]
        agent.requests.clear()
        result = asyncio.run(run_from_config(CollectionConfig(**given, resume=True)))
        assert result.exit_status == 0
        assert [(r["_ng_task_index"], r["_ng_attempt_index"]) for r in agent.requests] == [(1, 1)]


def test_a_place_holding_another_runs_inputs_or_a_dataset_is_refused_and_left_alone(pytester: pytest.Pytester) -> None:
    """Two runs given one place: the second would move the first's inputs into its own earlier results,
    and the first's resume would score its results against the second's rows."""
    write_rows(pytester.path / "a.jsonl", tasks(2))
    write_rows(pytester.path / "b.jsonl", tasks(1))
    with ScriptedAgent() as agent:
        url = f"--rollouts-agent={agent.url}"
        run_rollouts(pytester, "a.jsonl", url, "--rollouts-materialized=shared/m.jsonl", out="a/r.jsonl")
        first = (pytester.path / "shared/m.jsonl").read_bytes()
        result = run_rollouts(pytester, "b.jsonl", url, "--rollouts-materialized=shared/m.jsonl", out="b/r.jsonl")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*shared/m.jsonl already holds a file that no earlier run of b/r.jsonl wrote*"])
        dataset = (pytester.path / "b.jsonl").read_bytes()
        result = run_rollouts(pytester, "b.jsonl", url, "--rollouts-materialized=b.jsonl", out="c/r.jsonl")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert len(agent.requests) == 2
    assert (pytester.path / "shared/m.jsonl").read_bytes() == first
    assert (pytester.path / "b.jsonl").read_bytes() == dataset
    assert not (pytester.path / "b").exists() and not list((pytester.path / "c").glob("*prev*"))


def test_a_resume_and_aggregate_refuse_inputs_that_are_not_the_runs_own(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent(_task_1_fails_once()) as agent:
        args = ("data.jsonl", f"--rollouts-agent={agent.url}")
        run_rollouts(pytester, *args, "--rollouts-materialized=inputs/m.jsonl")
        place = pytester.path / "inputs/m.jsonl"
        place.write_bytes(place.read_bytes().replace(b'"_ng_task_index":1', b'"_ng_task_index":7'))
        result = run_rollouts(pytester, *args, "--rollouts-resume")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*cannot resume: inputs/m.jsonl is not the materialized inputs this run wrote*"])
        assert len(agent.requests) == 2
    done = aggregate(pytester.path, "--input", "out/r.jsonl", "--out", "merged/all.jsonl")
    assert done.returncode == 8 and "inputs/m.jsonl: not the materialized inputs " in done.stderr, done.stderr


def test_a_resume_told_where_the_inputs_moved_records_it(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    with ScriptedAgent(_task_1_fails_once()) as agent:
        args = ("data.jsonl", f"--rollouts-agent={agent.url}")
        run_rollouts(pytester, *args, "--rollouts-materialized=a/m.jsonl")
        (pytester.path / "b").mkdir()
        (pytester.path / "a/m.jsonl").rename(pytester.path / "b/m.jsonl")
        run_rollouts(pytester, *args, "--rollouts-resume", "--rollouts-materialized=b/m.jsonl").assert_outcomes(
            passed=3
        )
    assert orjson.loads((pytester.path / "out/r_run_manifest.json").read_bytes())["materialized"] == "../b/m.jsonl"
    done = aggregate(pytester.path, "--input", "out/r.jsonl", "--out", "merged/all.jsonl", "--require-complete")
    assert done.returncode == 0, done.stderr


def test_a_suite_collects_none_of_the_runs_own_files_as_datasets(pytester: pytest.Pytester) -> None:
    """A suite declaring ``*.jsonl`` with the run's files inside it: the next run collects its dataset
    only, not its output, its materialized inputs or an earlier set moved aside."""
    suite = pytester.path / "suite"
    with ScriptedAgent(_task_1_fails_once()) as agent:
        (suite / "sub").mkdir(parents=True)
        declaration = f'datasets = ["*.jsonl"]\nagent = "policy"\n\n[agents.policy]\nurl = "{agent.url}"\n'
        (suite / "rollouts.toml").write_text(declaration)
        write_rows(suite / "data.jsonl", tasks(2))
        args = ("suite", "--rollouts-materialized=suite/sub/m.jsonl")
        run_rollouts(pytester, *args, out="suite/out/r.jsonl")
        run_rollouts(pytester, *args, "--rollouts-resume", out="suite/out/r.jsonl").assert_outcomes(passed=2)
        run_rollouts(pytester, *args, out="suite/out/r.jsonl").assert_outcomes(passed=2)
        assert list((suite / "out").glob("r.prev-*"))
        result = run_rollouts(pytester, *args, "--co", out="suite/out/r.jsonl")
    assert [line.strip() for line in result.stdout.lines if "DatasetFile" in line] == ["<DatasetFile data.jsonl>"]


def test_an_ini_place_is_read_from_the_rootdir_and_the_report_may_not_take_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\nrollouts_out = io/r.jsonl\nrollouts_materialized = io/m.jsonl\n")
    data = str(write_rows(pytester.path / "data.jsonl", tasks(1)))
    monkeypatch.chdir(pytester.mkdir("sub"))
    with ScriptedAgent() as agent:
        pytester.runpytest(*QUIET, data, f"--rollouts-agent={agent.url}").assert_outcomes(passed=1)
        refused = pytester.runpytest(*QUIET, data, f"--rollouts-agent={agent.url}", "--rollouts-html=../io/m.jsonl")
        assert refused.ret == pytest.ExitCode.USAGE_ERROR and len(agent.requests) == 1
    refused.stderr.fnmatch_lines(["*../io/m.jsonl is one of this run's files*"])
    assert (pytester.path / "io/m.jsonl").exists() and not (pytester.path / "sub/io").exists()
