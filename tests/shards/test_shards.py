"""Shards on many machines, merged into one run that proves it is complete."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_rollouts import CollectionConfig, run
from pytest_rollouts.rows.shard import in_shard

from ..agents import ScriptedAgent
from ..helpers import QUIET, Artifacts, aggregate, keys, run_rollouts, tasks, write_rows


def metrics(path: Path) -> list[dict]:
    """The score, without ``perf_summary``: a session's latency is not part of it."""
    return [{k: v for k, v in e.items() if k != "perf_summary"} for e in json.loads(path.read_text())]


@pytest.fixture(scope="module")
def sharded_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 20-task, 2-repeat run done whole (whole/) and as shards 0/3, 1/3, 2/3 (shards/), once for the
    module through the Python API: what these tests hold to account is the merge, not the session
    (``test_a_shard_session_runs_its_tasks_and_deselects_the_rest`` is the session's)."""
    root = tmp_path_factory.mktemp("sharded")
    write_rows(root / "data.jsonl", tasks(20))
    with ScriptedAgent() as agent:
        common = {"input": str(root / "data.jsonl"), "agents": {"policy": agent.url}, "repeats": 2}
        run(CollectionConfig(**common, out=str(root / "whole" / "r.jsonl")))
        for k in range(3):
            shard = f"shards/shard-{k}.jsonl"
            run(CollectionConfig(**common, out=str(root / shard), shard=f"{k}/3", no_aggregate=True))
            mine = [t for t in range(20) if in_shard(t, (k, 3))]
            assert sorted({t for t, _ in keys(Artifacts(root, shard).materialized)}) == mine
    return root


@pytest.fixture
def sharded(sharded_once: Path, pytester: pytest.Pytester) -> Path:
    """A copy of the module's sharded run in this test's directory, to change as it likes."""
    shutil.copytree(sharded_once, pytester.path, dirs_exist_ok=True)
    return pytester.path


def test_a_shard_session_runs_its_tasks_and_deselects_the_rest(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(20))
    common = ("data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2")
    for k in range(3):
        result = run_rollouts(
            pytester, *common, f"--rollouts-shard={k}/3", "--rollouts-no-aggregate", out=f"shards/shard-{k}.jsonl"
        )
        mine = [t for t in range(20) if in_shard(t, (k, 3))]
        result.assert_outcomes(passed=len(mine), deselected=20 - len(mine))
        assert sorted({t for t, _ in keys(Artifacts(pytester.path, f"shards/shard-{k}.jsonl").materialized)}) == mine
    merged = aggregate(pytester.path, "--input", "shards/shard-*.jsonl", "--out", "m/r.jsonl", "--require-complete")
    assert merged.returncode == 0, merged.stderr


def test_shards_merged_equal_the_single_run(sharded: Path) -> None:
    result = aggregate(sharded, "--input", "shards/shard-*.jsonl", "--out", "merged/r.jsonl", "--require-complete")
    assert result.returncode == 0, result.stderr
    assert "Metrics cover" not in result.stdout, "complete: no coverage report"
    whole, merged = Artifacts(sharded, "whole/r.jsonl"), Artifacts(sharded, "merged/r.jsonl")
    assert sorted(keys(merged.rows)) == sorted(keys(whole.rows)) == sorted(keys(merged.materialized))
    assert metrics(sharded / "merged" / "r_aggregate_metrics.json") == metrics(
        sharded / "whole" / "r_aggregate_metrics.json"
    )


def test_a_missing_shard_is_named(sharded: Path) -> None:
    result = aggregate(sharded, "--input", "shards/shard-0.jsonl,shards/shard-2.jsonl", "--out", "m/r.jsonl")
    assert result.returncode == 8
    assert "missing shards: 1/3" in result.stderr
    assert "rollout keys of the run are in no shard" in result.stderr
    assert not (sharded / "m" / "r.jsonl").exists(), "nothing is written"


def test_a_doubled_shard_is_named(sharded: Path) -> None:
    copy = sharded / "shards" / "again"
    copy.mkdir()
    for path in (sharded / "shards").glob("shard-1*"):
        (copy / path.name).write_bytes(path.read_bytes())
    result = aggregate(sharded, "--input", "shards/shard-*.jsonl,shards/again/shard-1.jsonl", "--out", "m/r.jsonl")
    assert result.returncode == 8
    assert "shard 1/3 appears more than once" in result.stderr
    assert "rollout keys are in more than one shard" in result.stderr


@pytest.mark.parametrize("sidecar", ["_failures", "_materialized_inputs", ""])
def test_a_shard_file_with_a_cut_last_line_is_refused_before_anything_is_written(sharded: Path, sidecar: str) -> None:
    """A cut failures sidecar was found only while writing, after the merged rows had replaced
    an earlier merge's."""
    earlier = aggregate(sharded, "--input", "shards/shard-*.jsonl", "--out", "m/r.jsonl")
    assert earlier.returncode == 0, earlier.stderr
    before = {p.name: (p.read_bytes(), p.stat().st_ino) for p in (sharded / "m").iterdir()}
    cut = sharded / "shards" / f"shard-1{sidecar}.jsonl"
    with open(cut, "ab") as out:
        out.write(b'{"_ng_task_index": 1, "_ng_rol')
    result = aggregate(sharded, "--input", "shards/shard-*.jsonl", "--out", "m/r.jsonl")
    assert result.returncode == 8
    advice = "so the file was damaged: restore it" if sidecar == "_materialized_inputs" else "resume that shard first"
    assert f"{cut}: the last line is cut short" in result.stderr and advice in result.stderr
    after = {p.name: (p.read_bytes(), p.stat().st_ino) for p in (sharded / "m").iterdir()}
    assert after == before, "nothing is written, not even the same bytes again"


@pytest.mark.parametrize("stray", ["repeated", "never-materialized"])
def test_a_result_row_twice_or_of_no_materialized_key_is_refused(sharded: Path, stray: str) -> None:
    """The merged file is what is kept and scored: a row repeated (in one shard or another) or of
    a key its shard never materialized would make it disagree with the score."""
    shard = sharded / "shards" / "shard-2.jsonl"
    # Its own row again, or another shard's row (a key shard 2 never materialized).
    source = shard if stray == "repeated" else sharded / "shards" / "shard-0.jsonl"
    row = json.loads(source.read_text().splitlines()[0])
    row["reward"] = 1.0 - row["reward"]
    with open(shard, "a") as out:
        out.write(json.dumps(row) + "\n")
    result = aggregate(sharded, "--input", "shards/shard-*.jsonl", "--out", "m/r.jsonl")
    assert result.returncode == 8, result.stdout
    key = f"({row['_ng_task_index']}, {row['_ng_rollout_index']}) in {shard}"
    if stray == "repeated":
        assert f"1 result rows repeat a key: {key}" in result.stderr
    else:
        assert f"1 result rows are of keys their shard never materialized: {key}" in result.stderr
    assert not (sharded / "m" / "r.jsonl").exists(), "nothing is written"


def test_a_shard_of_another_run_is_refused(sharded: Path, pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    run_rollouts(
        pytester,
        "data.jsonl",
        f"--rollouts-agent={agent.url}",
        "--rollouts-repeats=3",
        "--rollouts-shard=1/3",
        out="other/shard-1.jsonl",
    )
    result = aggregate(
        sharded, "--input", "shards/shard-0.jsonl,other/shard-1.jsonl,shards/shard-2.jsonl", "--out", "m/r.jsonl"
    )
    assert result.returncode == 8
    assert "is not from the same run" in result.stderr and "repeats: recorded " in result.stderr


def test_merge_gates_like_a_run(sharded: Path) -> None:
    result = aggregate(sharded, "--input", "shards/*.jsonl", "--out", "m/r.jsonl", "--fail-under=0.9")
    assert result.returncode == 7
    assert "EVAL FAILED: mean reward 0.6500 is below --fail-under 0.9." in result.stderr
    passing = aggregate(sharded, "--input", "shards/*.jsonl", "--out", "m2/r.jsonl", "--fail-under=0.5")
    assert passing.returncode == 0
    assert "--fail-under 0.5: mean reward 0.6500" in passing.stdout, "the mean a passing gate compared is printed"


def test_nemo_gym_style_shards_without_manifests(tmp_path: Path) -> None:
    for k, task_range in enumerate((range(0, 2), range(2, 4))):
        stem = tmp_path / f"rs{k}"
        rows = [
            {"_ng_task_index": t, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}, "reward": float(t % 2)}
            for t in task_range
        ]
        write_rows(Path(f"{stem}.jsonl"), rows)
        write_rows(
            Path(f"{stem}_materialized_inputs.jsonl"), [{k2: v for k2, v in r.items() if k2 != "reward"} for r in rows]
        )
    result = aggregate(tmp_path, "--input", "rs*.jsonl", "--out", "all.jsonl", "--require-complete", "--trust-shards")
    assert result.returncode == 0, result.stderr
    assert "a: mean reward 0.5000" in result.stdout


def test_shard_is_validated(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-shard=3/3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rollouts-shard*K/N needs 0 <= K < N*"])


def test_fanned_out_shards_merge_complete_and_a_missing_one_is_counted(pytester: pytest.Pytester) -> None:
    rows = tasks(12)
    for row in rows:
        row["agent_ref"] = {"name": "policy"}
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent() as a, ScriptedAgent() as b:
        common = (
            "data.jsonl",
            f"--rollouts-agent=a={a.url}",
            f"--rollouts-agent=b={b.url}",
            "--rollouts-fan-out=policy=a,b",
            "--rollouts-repeats=a=2,b=1",
            "--rollouts-no-aggregate",
        )
        for k in range(2):
            run_rollouts(pytester, *common, f"--rollouts-shard={k}/2", out=f"fan/shard-{k}.jsonl")
    whole = aggregate(pytester.path, "--input", "fan/shard-*.jsonl", "--out", "m/r.jsonl", "--require-complete")
    assert whole.returncode == 0, whole.stderr
    assert len(Artifacts(pytester.path, "m/r.jsonl").rows) == 36
    part = aggregate(pytester.path, "--input", "fan/shard-0.jsonl", "--out", "p/r.jsonl")
    assert part.returncode == 8
    lost = sum(3 for t in range(12) if in_shard(t, (1, 2)))
    assert f"{lost} of the 36 rollouts of data.jsonl are in no shard" in part.stderr


@pytest.mark.parametrize("workers", [0, 2])
def test_a_shard_that_no_task_falls_to_still_completes_the_merge(
    pytester: pytest.Pytester, agent: ScriptedAgent, workers: int
) -> None:
    """Its run used to end "no tests ran" (exit 5) and write nothing, so the merge named it missing."""
    write_rows(pytester.path / "data.jsonl", tasks(10))
    [empty] = [k for k in range(3) if not any(in_shard(t, (k, 3)) for t in range(10))]
    for k in range(3):
        args = ("data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2", f"--rollouts-shard={k}/3")
        out = f"--rollouts-out=shards/shard-{k}.jsonl"
        if k == empty:
            n = ("-n", str(workers)) if workers else ()
            result = pytester.runpytest_subprocess(*QUIET, *n, *args, out)
            result.stdout.fnmatch_lines([f"*none of the dataset's tasks fall to shard {k}/3*"])
        else:
            result = pytester.runpytest(*QUIET, *args, out)
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert Artifacts(pytester.path, f"shards/shard-{empty}.jsonl").materialized == []
    merged = aggregate(
        pytester.path, "--input", "shards/shard-*.jsonl", "--out", "merged/r.jsonl", "--require-complete"
    )
    assert merged.returncode == 0, merged.stderr
    everything = [(t, r) for t in range(10) for r in range(2)]
    assert sorted(keys(Artifacts(pytester.path, "merged/r.jsonl").rows)) == everything
