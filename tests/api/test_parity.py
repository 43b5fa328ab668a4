"""The same dataset, with faults of every kind, through ``pytest`` and through ``run_from_config``:
the same files and numbers, field by field, timing aside. The two front doors share one core;
this is what keeps them from drifting apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_rollouts import CollectionConfig, run

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import read_rows, run_rollouts, write_rows

# One row per fault, then plain rows; each row says what its agent does with it.
FAULTS = ["500", "reset", "no_reward", "mask_sample", "agent_failure", "skipped"]
ROWS = [
    {"responses_create_params": {"input": f"q{i}"}, "fault": f, "answer": "1", "expected_answer": "1"}
    for i, f in enumerate(FAULTS)
]
ROWS += [
    {"responses_create_params": {"input": f"p{i}"}, "answer": str(i % 2), "expected_answer": "1"} for i in range(6)
]
# Measurements of this one run, not results: every row has its own, and so have the metrics.
TIMING = ("elapsed", "latency", "perf_summary", "per_hour")


def faulty(row: dict[str, Any], seen: int) -> Reply:
    fault = row.get("fault")
    if fault == "500":
        return Reply(status=500, json={"error": "boom"})
    if fault == "reset":
        return Reply(reset=True)
    if fault == "no_reward":
        return Reply(json={"score": 1})
    if fault == "mask_sample":
        return Reply(json={"reward": 1.0, "mask_sample": True})
    if fault == "agent_failure":
        return Reply(json={"_ng_failure_class": "environment_error", "failure_reason": "the sandbox died"})
    if fault == "skipped":
        return Reply(json={"_ng_failure_class": "skipped", "failure_reason": "not applicable"})
    # A reward that differs by rollout, so pass@k and the spreads are not trivial.
    reply = verifier(row, seen)
    if row["_ng_rollout_index"] == 1 and row["_ng_task_index"] % 3 == 0:
        reply.json["reward"] = 0.5
    return reply


def untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if not any(word in k for word in TIMING)}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def by_key(path: Path) -> dict[tuple[int, int], dict[str, Any]]:
    rows = read_rows(path)
    keyed = {(r["_ng_task_index"], r["_ng_rollout_index"]): untimed(r) for r in rows}
    assert len(keyed) == len(rows), "a key was written twice"
    return keyed


def test_pytest_and_run_from_config_leave_the_same_files_and_numbers(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", ROWS)
    options = {"repeats": 2, "retries": 0, "count_as_zero": ["environment_error"]}
    with ScriptedAgent(faulty) as agent:
        session = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={agent.url}",
            "--rollouts-repeats=2",
            "--rollouts-retries=0",
            "--rollouts-count-as-zero=environment_error",
            out="plugin/r.jsonl",
        )
        assert session.ret == pytest.ExitCode.OK  # failure classes are recorded and scored, not a broken run
        result = run(CollectionConfig(input="data.jsonl", out="api/r.jsonl", agents={"default": agent.url}, **options))
    assert result.exit_status == session.ret
    plugin, api = pytester.path / "plugin", pytester.path / "api"

    # What was sent: the same materialized rollouts, byte for byte.
    assert (plugin / "r_materialized_inputs.jsonl").read_bytes() == (api / "r_materialized_inputs.jsonl").read_bytes()
    # Results: the same keys, rewards and fields.
    assert by_key(plugin / "r.jsonl") == by_key(api / "r.jsonl")
    # Failures: the same classes, messages, statuses and bodies.
    failures = by_key(plugin / "r_failures.jsonl")
    assert failures == by_key(api / "r_failures.jsonl")
    classes = {key[0]: row["_ng_failure_class"] for key, row in failures.items()}
    assert classes == {0: "agent_run_error", 1: "agent_request_failed", 4: "environment_error", 5: "skipped"}
    # Coverage and metrics: the whole metrics file, field by field.
    metrics = untimed(orjson.loads((plugin / "r_aggregate_metrics.json").read_bytes()))
    assert metrics == untimed(orjson.loads((api / "r_aggregate_metrics.json").read_bytes()))
    assert metrics == untimed(result.metrics)
    [group] = metrics
    assert group["coverage"] == {
        "expected": 24,
        "completed": 16,  # 12 plain + no_reward 2 + mask_sample 2
        "scored": 14,  # completed, less masked and unrewarded, plus environment_error counted as zero
        "missing": 10,
        "masked": 2,
        "unrewarded": 2,
        "counted_as_zero": 2,
        "imputed_zero": 0,
        "missing_by_class": {
            "agent_request_failed": 2,
            "agent_run_error": 2,
            "mask_sample": 2,
            "no_reward": 2,
            "skipped": 2,
        },
        "failed": 10,  # the failure classes, environment_error counted as zero too, and no_reward
        "failed_by_class": {
            "agent_request_failed": 2,
            "agent_run_error": 2,
            "environment_error": 2,
            "no_reward": 2,
            "skipped": 2,
        },
    }
    # The same manifest: the inputs' fingerprints and the options that shape the materialized set.
    manifests = [orjson.loads((d / "r_run_manifest.json").read_bytes()) for d in (plugin, api)]
    assert manifests[0] == manifests[1]
