"""Our files against NeMo Gym 0.7.0's own, recorded from a real stack (``golden/``, ``record_golden.sh``).

No NeMo Gym runs here: a loopback agent answers each rollout as the recorded stack did
(``nemo_gym.replayed``), and a stand-in head server serves the recorded stack's config, so the same
data and config go through our collector and are compared with what NeMo Gym's wrote.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from ..agents import Reply, ScriptedAgent
from ..helpers import embedded, port, run_rollouts
from .nemo_gym import (
    AGENT,
    ENVIRONMENT_SERVER,
    GOLDEN,
    artifacts,
    copy_run,
    key,
    metrics_keys,
    replaying,
    resume_sends,
    rewards,
    stack_config,
)

OUT = "out/rollouts.jsonl"
# The options that make NeMo Gym's `gym eval run --agent AGENT --num-repeats 2 +num_repeats_add_seed=true`.
SAME_RUN = (f"--rollouts-agent-map=_default={AGENT}", "--rollouts-repeats=2", "--rollouts-repeats-add-seed")
LEGACY = ("--rollouts-environment-routing-mode=legacy", f"--rollouts-environment-server={ENVIRONMENT_SERVER}")
MODES = {"agent": (), "legacy": LEGACY}
# What our stored rows add to NeMo Gym's, on purpose: the attempt's wall time on every row (contracts.md),
# and on a failure row its attempt index, terminal flag and the in-run tries before it (docs/resume.md).
OURS_ONLY = {"elapsed_seconds"}
OURS_ONLY_ON_FAILURES = OURS_ONLY | {"_ng_attempt_index", "_ng_failure_terminal", "_ng_earlier_tries"}
# A failure's type and message are each collector's own words about the same 422 (aiohttp's
# ClientResponseError text there, ours here); class, status and body are compared.
WORDED_APART = {"_ng_failure_type", "_ng_failure_message"}


def _run(pytester: pytest.Pytester, state: dict[str, str], replay: ScriptedAgent, *args: str) -> pytest.RunResult:
    state["yaml"] = stack_config(port(replay.url))
    shutil.copy(GOLDEN / "data.jsonl", pytester.path / "data.jsonl")
    return run_rollouts(pytester, "data.jsonl", f"--rollouts-head-server={state['address']}", *SAME_RUN, *args, out=OUT)


def _without(row: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in keys}


@pytest.mark.parametrize("mode", MODES)
def test_our_rows_of_the_same_data_and_config_are_nemo_gyms_field_by_field(
    pytester: pytest.Pytester,
    head_server,
    mode: str,
) -> None:
    """The materialized inputs equal NeMo Gym's row for row, field by field: under agent routing
    unstamped and naming the agent (NeMo Gym stamps ``_ng_environment_server`` at preprocessing only in
    legacy and taskset modes, ``_environment_server_for_config_row``; 1f82d1a stamped them), under legacy
    routing stamped and given the server's agent (``_stamp_environment_server_agent_refs``). Results
    and failures match but for the fields listed above, each stamped with the environment server's type
    (``_ng_result_type``: ``legacy_agent``) as NeMo Gym's are; the metrics entry is labelled alike."""
    _, state = head_server
    with ScriptedAgent(replaying(mode)) as replay:
        result = _run(pytester, state, replay, *MODES[mode])
    assert result.parseoutcomes() == {"passed": 20, "agent_run_error": 1}
    theirs, ours = artifacts(mode), artifacts(pytester.path / "out")
    assert ours["_materialized_inputs"] == theirs["_materialized_inputs"]
    assert rewards(ours[""]) == rewards(theirs[""])
    by_key = {key(row): row for row in theirs[""]}
    for row in ours[""]:
        assert _without(row, OURS_ONLY) == by_key[key(row)]
    failures = {key(row): row for row in theirs["_failures"]}
    assert sorted(failures) == sorted(key(row) for row in ours["_failures"])
    for row in ours["_failures"]:
        skip = OURS_ONLY_ON_FAILURES | WORDED_APART
        assert _without(row, skip) == _without(failures[key(row)], WORDED_APART)
    [entry] = orjson.loads((pytester.path / "out" / "rollouts_aggregate_metrics.json").read_bytes())
    [their_entry] = orjson.loads((GOLDEN / mode / "rollouts_aggregate_metrics.json").read_bytes())
    label = ("agent_ref", "_ng_environment_server")
    assert {k: entry[k] for k in label} == {k: their_entry[k] for k in label}


def test_our_metrics_file_has_nemo_gyms_keys(pytester: pytest.Pytester, head_server) -> None:
    """Computed locally (the loopback agent has no ``/aggregate_metrics``), every key of NeMo Gym's
    metrics file is in ours: the entry's, its sections' and their per-task and per-repeat entries'."""
    _, state = head_server
    with ScriptedAgent(replaying()) as replay:
        _run(pytester, state, replay)
    ours = metrics_keys(pytester.path / "out" / "rollouts_aggregate_metrics.json")
    theirs = metrics_keys(GOLDEN / "agent" / "rollouts_aggregate_metrics.json")
    for part, keys in theirs.items():
        assert keys <= ours[part], (part, sorted(keys - ours[part]))


def test_we_resume_nemo_gyms_partial_run_sending_exactly_what_it_lacks(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    """NeMo Gym's partial run (its collector stopped with SIGTERM part way) resumed by ours: exactly the
    rollouts without a row are sent, and the run ends with NeMo Gym's complete keys and rewards.

    NeMo Gym materializes agent-routed rows unstamped, naming the agent; 1f82d1a keyed a recorded row
    by its ``_ng_environment_server`` stamp, else its agent, while its items were keyed by the server
    the agent is behind, so no recorded row found its item and the resume sent nothing, exit 0."""
    _, state = head_server
    copy_run("partial", pytester.path / "out")
    partial = artifacts("partial")
    missing = sorted({key(row) for row in partial["_materialized_inputs"]} - {key(row) for row in partial[""]})
    with ScriptedAgent(replaying()) as replay:
        result = _run(pytester, state, replay, "--rollouts-resume")
        assert sorted(replay.keys()) == missing
    assert result.parseoutcomes() == {"passed": 20, "agent_run_error": 1}
    ours, complete = artifacts(pytester.path / "out"), artifacts("agent")
    assert rewards(ours[""]) == rewards(complete[""])
    assert len(ours[""]) == len(complete[""]), "nothing written twice"
    assert sorted(map(key, ours["_failures"])) == sorted(map(key, complete["_failures"]))


def test_an_xdist_resume_of_nemo_gyms_run_scores_it_in_the_servers_group(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    """Under ``-n 2`` the controller scores from the files alone. NeMo Gym's run has no manifest of ours
    to say which server fronted the agent, but each of its stored rows names both (``agent_ref`` and
    ``_ng_environment_server``), as its ``_call_aggregate_metrics`` reads them: the run is scored and
    labelled in the server's group, as in one process (it was the agent's, the label without the server)."""
    _, state = head_server
    copy_run("partial", pytester.path / "out")
    with ScriptedAgent(replaying()) as replay:
        state["yaml"] = stack_config(port(replay.url))
        shutil.copy(GOLDEN / "data.jsonl", pytester.path / "data.jsonl")
        result = pytester.runpytest_subprocess(
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "data.jsonl",
            f"--rollouts-head-server={state['address']}",
            *SAME_RUN,
            f"--rollouts-out={OUT}",
            "--rollouts-resume",
        )
    result.stdout.fnmatch_lines([f"{ENVIRONMENT_SERVER}: mean reward 0.6750 * over 40 rollouts*"])
    [entry] = orjson.loads((pytester.path / "out" / "rollouts_aggregate_metrics.json").read_bytes())
    assert (entry["agent_ref"], entry["_ng_environment_server"]) == ({"name": AGENT}, ENVIRONMENT_SERVER)


def test_aggregate_and_compare_group_nemo_gyms_run_as_it_does(tmp_path: Path) -> None:
    """``aggregate`` and ``compare`` read NeMo Gym's run from its files alone: its rows group under the
    environment server they went through, as NeMo Gym's ``_metrics_group`` groups them."""
    copy_run("agent", tmp_path / "theirs")
    copy_run("legacy", tmp_path / "legacy")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest_rollouts", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )

    merged = cli("aggregate", "--input", "theirs/rollouts.jsonl", "--out", "merged/r.jsonl")
    assert f"{ENVIRONMENT_SERVER}: mean reward 0.6750" in merged.stdout, merged.stdout + merged.stderr
    [entry] = orjson.loads((tmp_path / "merged" / "r_aggregate_metrics.json").read_bytes())
    assert (entry["agent_ref"], entry["_ng_environment_server"]) == ({"name": AGENT}, ENVIRONMENT_SERVER)
    compared = cli("compare", "theirs/rollouts.jsonl", "legacy/rollouts.jsonl")
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "string_match_simple_agent" not in compared.stdout, compared.stdout


def test_report_on_nemo_gyms_run_shows_its_metrics(tmp_path: Path) -> None:
    """NeMo Gym's metrics file records no coverage (ours does): the report scores the coverage from
    the rows and takes each group's metrics from the file, where it showed no mean reward at all."""
    copy_run("agent", tmp_path / "theirs")
    command = [sys.executable, "-m", "pytest_rollouts", "report", "theirs/rollouts.jsonl", "-o", "r.html"]
    done = subprocess.run([*command, "--fail-under", "0.6"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = embedded((tmp_path / "r.html").read_bytes(), "report-data")["summary"]
    assert summary["mean_reward"] == 0.675 and summary["metrics_file"] == "theirs/rollouts_aggregate_metrics.json"
    assert summary["gates"]["exit_code"] == 0, summary["gates"]
    assert summary["outcomes"] == "40 of 42 rollouts scored; failed: agent_run_error 2"


def test_the_python_api_resumes_nemo_gyms_partial_run_too(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    head_server,
) -> None:
    """``run`` plans a resume as the plugin does (``plan.build``): the same rollouts, the same end."""
    from pytest_rollouts import CollectionConfig, CollectionWarning, run

    _, state = head_server
    monkeypatch.chdir(tmp_path)
    copy_run("partial", tmp_path / "out")
    shutil.copy(GOLDEN / "data.jsonl", tmp_path / "data.jsonl")
    partial = artifacts("partial")
    missing = sorted({key(row) for row in partial["_materialized_inputs"]} - {key(row) for row in partial[""]})
    with ScriptedAgent(replaying()) as replay:
        state["yaml"] = stack_config(port(replay.url))
        config = CollectionConfig(
            input="data.jsonl",
            out=OUT,
            head_server=state["address"],
            agent_map={"_default": AGENT},
            repeats=2,
            repeats_add_seed=True,
            resume=True,
        )
        with pytest.warns(CollectionWarning, match="no run manifest next to out/rollouts.jsonl"):
            result = run(config)
        assert sorted(replay.keys()) == missing
    [group] = result.score.groups
    assert (group.agent, group.coverage.completed, group.coverage.failed) == (ENVIRONMENT_SERVER, 40, 2), (
        "scored in the server's group, as the plugin scores it"
    )
    assert rewards(artifacts(tmp_path / "out")[""]) == rewards(artifacts("agent")[""])


def test_shards_through_the_head_server_merge_into_nemo_gyms_groups(
    pytester: pytest.Pytester,
    head_server,
) -> None:
    """Agent-routed rows are materialized unstamped; each shard's manifest records which server fronted
    their agent (``fronted_by``), so ``aggregate``, which reads the files alone, scores and labels the
    merged run in the server's group as the run itself did, and as NeMo Gym's ``_metrics_group`` does."""
    _, state = head_server
    with ScriptedAgent(replaying()) as replay:
        for shard in ("0/2", "1/2"):
            _run(pytester, state, replay, f"--rollouts-shard={shard}", "--rollouts-no-aggregate")
            (pytester.path / OUT).rename(pytester.path / f"out/shard-{shard[0]}.jsonl")
            for suffix in ("_failures", "_materialized_inputs", "_run_manifest"):
                ending = ".json" if suffix == "_run_manifest" else ".jsonl"
                (pytester.path / f"out/rollouts{suffix}{ending}").rename(
                    pytester.path / f"out/shard-{shard[0]}{suffix}{ending}"
                )
    merged = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_rollouts",
            "aggregate",
            "--input",
            "out/shard-*.jsonl",
            "--out",
            "merged/r.jsonl",
        ],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert f"{ENVIRONMENT_SERVER}: mean reward" in merged.stdout
    [entry] = orjson.loads((pytester.path / "merged" / "r_aggregate_metrics.json").read_bytes())
    assert (entry["agent_ref"], entry["_ng_environment_server"]) == ({"name": AGENT}, ENVIRONMENT_SERVER)
    assert entry["coverage"]["expected"] == 42


@pytest.mark.parametrize("mode", MODES)
def test_our_partial_run_carries_what_nemo_gyms_resume_reads(
    pytester: pytest.Pytester,
    head_server,
    mode: str,
) -> None:
    """Our partial run (the agent hung up on half the tasks) read as NeMo Gym's resume reads it
    (``nemo_gym.resume_sends``, from its source): it sends exactly the rollouts we would send again.

    Under agent routing NeMo Gym resolves a stamped row's ``_ng_environment_server`` in its local
    config, which holds no environment server; 1f82d1a stamped every row routed through the server in
    front of its agent, and NeMo Gym's resume ended in ``ConfigKeyError: Missing key
    string_match_environment_server``."""
    _, state = head_server

    replayed = replaying(mode)

    def half(row: dict[str, Any], seen: int) -> Reply:
        return Reply(reset=True) if row["_ng_task_index"] >= 10 else replayed(row, seen)

    with ScriptedAgent(half) as agent:
        _run(pytester, state, agent, "--rollouts-retries=0", *MODES[mode])
    out = pytester.path / OUT
    config = {name: entry for name, entry in yaml.safe_load(state["yaml"]).items() if isinstance(entry, dict)}
    sends = resume_sends(out, config=config, mode=mode)
    assert sends == [(task, rollout) for task in range(10, 21) for rollout in range(2)]


def test_the_recorded_files_are_what_the_recording_says() -> None:
    """The golden runs are NeMo Gym 0.7.0's, whole where they should be: a guard on re-recording."""
    recording = orjson.loads((GOLDEN / "recording.json").read_bytes())
    assert recording["nemo_gym"] == "0.7.0"
    complete = artifacts("agent")
    assert len(complete[""]) + len(complete["_failures"]) == len(complete["_materialized_inputs"]) == 42
    partial = artifacts("partial")
    assert 0 < len(partial[""]) < 40 and partial["_materialized_inputs"] == complete["_materialized_inputs"]
    assert not (GOLDEN / "partial" / "rollouts_aggregate_metrics.json").exists(), "stopped before its metrics"
    assert Path(GOLDEN / "head_config.yaml").read_text().count("port:") >= 4
