"""The Python API: rows prepared in Python are the rows a run materializes, and the input is never changed."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Any

import pytest

from pytest_rollouts import preprocess_examples

from ..agents import ScriptedAgent
from ..helpers import Artifacts, run_rollouts, tasks, write_rows


def keys(rows: list[dict[str, Any]]) -> list[tuple[int, int, str | None]]:
    return [(r["_ng_task_index"], r["_ng_rollout_index"], (r.get("agent_ref") or {}).get("name")) for r in rows]


def test_rows_are_stamped_copies_and_the_input_is_left_alone() -> None:
    raw = [
        {"responses_create_params": {"input": "a", "metadata": {"extra_body": '{"top_k": 5}'}}, "x": [1]},
        {"responses_create_params": {"input": "b"}, "agent_ref": {"name": "judge", "kept": True}},
    ]
    before = copy.deepcopy(raw)
    rows = preprocess_examples(raw, agent_map={"_default": "policy"}, num_repeats=2, num_repeats_add_seed=True)
    assert raw == before, "the input rows were changed"
    assert keys(rows) == [(0, 0, "policy"), (0, 1, "policy"), (1, 0, "judge"), (1, 1, "judge")]
    assert rows[2]["agent_ref"] == {"name": "judge", "kept": True}
    # NeMo Gym's shape: the seed is in a JSON string, beside what the row had there.
    seeds = [json.loads(r["responses_create_params"]["metadata"]["extra_body"]) for r in rows]
    assert seeds == [{"top_k": 5, "seed": 0}, {"top_k": 5, "seed": 1}, {"seed": 0}, {"seed": 1}]
    assert rows[0]["x"] == [1]


def test_repeats_by_agent_fan_out_and_task_sources() -> None:
    raw = [{"responses_create_params": {}}, {"responses_create_params": {}, "task_source": "math"}, {}]
    raw[2] = {"responses_create_params": {}, "task_source": "later"}
    rows = preprocess_examples(
        raw,
        fan_out={"_default": ["a", "b"]},
        agent_map={"math": "b"},
        num_repeats={"a": 1, "b": 2, "_default": 3},
    )
    # Fanned-out copies number their rollouts on from one agent to the next; a task source no
    # map names is left for the run to resolve, with the _default count.
    assert keys(rows) == [
        (0, 0, "a"),
        (0, 1, "b"),
        (0, 2, "b"),
        (1, 0, "b"),
        (1, 1, "b"),
        (2, 0, None),
        (2, 1, None),
        (2, 2, None),
    ]
    assert all("agent_ref" not in r for r in rows[5:])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({}, "row 0: it names no agent (agent_ref.name) and agent_map has no '_default' entry"),
        ({"agent_map": {"_default": "p"}, "num_repeats": 0}, "num_repeats: must be from 1 to 1000000"),
        ({"agent_map": {"_default": "p"}, "fan_out": {"_default": ["a"]}}, "is both mapped"),
    ],
)
def test_bad_arguments_are_value_errors_that_say_what_is_wrong(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        preprocess_examples([{"responses_create_params": {}}], **kwargs)


def test_the_same_rows_a_run_materializes(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """One routing and one set of stamps for the plugin and the API."""
    raw = tasks(3)
    raw[1] = {**raw[1], "agent_ref": {"name": "default"}}
    write_rows(pytester.path / "data.jsonl", raw)
    run_rollouts(
        pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2", "--rollouts-repeats-add-seed"
    ).assert_outcomes(passed=3)
    assert Artifacts(pytester.path).materialized == preprocess_examples(
        raw, agent_map={"_default": "default"}, num_repeats=2, num_repeats_add_seed=True
    )


def test_importing_the_api_imports_neither_pytest_nor_aiohttp() -> None:
    code = (
        "import sys\n"
        "from pytest_rollouts import preprocess_examples\n"
        "preprocess_examples([{'agent_ref': {'name': 'a'}}])\n"
        "print(sorted(m for m in ('pytest', '_pytest', 'aiohttp', 'httptools') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr
