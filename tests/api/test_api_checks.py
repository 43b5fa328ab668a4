"""The Python API's arguments get the plugin's checks and its care with secrets, in the API's own
words; found by a black-box review of the API."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

import pytest

import pytest_rollouts
from pytest_rollouts import CollectionConfig, CollectionRefused, preprocess_examples, run, run_examples

from ..agents import ScriptedAgent
from ..helpers import tasks, write_rows

SECRET_URL = "http://user:hunter2pw@127.0.0.1:9"
SECRET_HEADER = "Authorization=Bearer s3cret"


@pytest.fixture(autouse=True)
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(3))
    return tmp_path


@pytest.mark.parametrize(
    "given",
    [
        {"out": "o/r.jsonl", "agents": {"p": SECRET_URL}, "agent_header": [SECRET_HEADER]},  # no input
        {"input": "data.jsonl", "out": "o/r.jsonl", "agents": {"p": SECRET_URL, "b": "nope"}},
        {"input": "data.jsonl", "out": "o", "agents": {"p": SECRET_URL}, "agent_header": [SECRET_HEADER]},
    ],
)
def test_a_config_error_never_shows_a_password_or_a_header_value(given: dict[str, Any]) -> None:
    for attempt in (lambda: run(given), lambda: CollectionConfig(**given)):
        with pytest.raises(ValueError) as refused:
            attempt()
        assert "hunter2pw" not in str(refused.value) and "s3cret" not in str(refused.value)
    assert "hunter2pw" not in repr(CollectionConfig(input="data.jsonl", out="o/r.jsonl", agents={"p": SECRET_URL}))


@pytest.mark.parametrize(
    "given",
    [
        {"agents": {"p": SECRET_URL}},
        {"agent": [SECRET_URL, f"b={SECRET_URL}"]},
        {"agents": {"p": "http://127.0.0.1:9"}, "model": SECRET_URL + "/v1"},
        {"head_server": SECRET_URL},
        {"agents": {"p": "http://127.0.0.1:9"}, "agent_header": [SECRET_HEADER]},
    ],
)
def test_no_dump_or_repr_of_a_config_shows_a_password(given: dict[str, Any]) -> None:
    """``model_dump_json()`` showed an agent's URL with its password, and repr a model's or head
    server's: a config logged or saved with a script's would carry them. The URL itself stays."""
    config = CollectionConfig(input="data.jsonl", out="o/r.jsonl", **given)
    for shown in (repr(config), str(config), config.model_dump_json(), str(config.model_dump())):
        assert "hunter2pw" not in shown and "s3cret" not in shown, shown
    urls = [address.url for address in config.agent] + [config.model or "", config.head_server or ""]
    assert any("hunter2pw" in url for url in urls) or config.agent_header


def test_a_config_error_names_the_apis_fields() -> None:
    given = {"input": "data.jsonl", "out": "o/r.jsonl", "agents": {"p": "http://127.0.0.1:9"}}
    with pytest.raises(ValueError, match="fail_under needs the metrics that no_aggregate skips") as refused:
        run({**given, "fail_under": 0.5, "no_aggregate": True})
    assert "--rollouts" not in str(refused.value)
    with pytest.raises(ValueError, match="fail_under needs the metrics that no_aggregate skips"):
        CollectionConfig(**given, fail_under=0.5, no_aggregate=True)


@pytest.mark.parametrize(
    ("fan_out", "words"),
    [
        ({"_default": []}, "lists no agents"),
        ({"_default": ["a", "a"]}, "lists a more than once"),
        ({"_default": ["a", ""]}, "empty agent name"),
        ({"_default": [1]}, "must list agent names"),
    ],
)
def test_a_fan_out_given_as_a_mapping_is_checked_as_the_option_is(fan_out: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        preprocess_examples(tasks(1), fan_out=fan_out)
    with pytest.raises(ValueError, match=words):
        run({"input": "data.jsonl", "out": "o/r.jsonl", "agents": {"a": "http://127.0.0.1:9"}, "fan_out": fan_out})
    assert not Path("o").exists()


def test_a_fan_out_of_one_agent_name_is_that_agent_not_its_letters() -> None:
    rows = preprocess_examples(tasks(1), fan_out={"_default": "policy"})
    assert [r["agent_ref"]["name"] for r in rows] == ["policy"]


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: preprocess_examples(tasks(1), agent_map="policy"), "agent_map must be a mapping"),
        (lambda: preprocess_examples({"a": 1}), "rows must be a list"),
        (lambda: preprocess_examples([1, 2]), "row 0 is a int"),
        (lambda: preprocess_examples(tasks(1), num_repeats=True), "num_repeats must be a count"),
        (
            lambda: preprocess_examples([{"responses_create_params": "hi"}], num_repeats_add_seed=True),
            "responses_create_params must be a JSON object",
        ),
        (lambda: run_examples(None, {"a": "http://127.0.0.1:9"}), "rows must be a list"),  # type: ignore[arg-type]
        (
            lambda: run_examples([], {"p": "http://127.0.0.1:9"}, agent_header=["q:X-Key=abc"]),
            "agent_header names agents not in agents: q",
        ),
    ],
)
def test_bad_arguments_are_value_errors_that_name_them(call: Any, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        call()


def test_with_one_agent_rows_naming_it_and_a_fan_out_of_the_default_need_nothing_more(here: Path) -> None:
    """One agent serves rows that name none without an agent map the user never gave: no conflict
    with a fan-out of ``_default``, and no "a typo?" notice when every row names its agent."""
    write_rows(here / "named.jsonl", [{**t, "agent_ref": {"name": "policy"}} for t in tasks(2)])
    with ScriptedAgent() as agent, warnings.catch_warnings():
        warnings.simplefilter("error", pytest_rollouts.CollectionWarning)
        named = run({"input": "named.jsonl", "out": "n/r.jsonl", "agents": {"policy": agent.url}})
        fanned = run(
            {
                "input": "data.jsonl",
                "out": "f/r.jsonl",
                "agents": {"policy": agent.url},
                "fan_out": {"_default": ["policy"]},
            }
        )
    assert named.score.coverage.completed == 2 and fanned.score.coverage.completed == 3


def test_messages_name_the_apis_fields_not_the_plugins_options(here: Path) -> None:
    with ScriptedAgent() as agent:
        gated = run({"input": "data.jsonl", "out": "o/r.jsonl", "agents": {"p": agent.url}, "fail_under": 0.99})
        assert "below fail_under 0.99" in gated.summary()
        write_rows(here / "data.jsonl", tasks(4))  # the input changed since the recorded run
        with pytest.raises(CollectionRefused, match=r"Run without resume .* or pass resume_recorded"):
            run({"input": "data.jsonl", "out": "o/r.jsonl", "agents": {"p": agent.url}, "resume": True})


def test_run_inside_a_running_loop_says_to_await_run_from_config() -> None:
    async def inside() -> None:
        with pytest.raises(RuntimeError, match="await run_from_config"):
            run({"input": "data.jsonl", "out": "o/r.jsonl", "agents": {"p": "http://127.0.0.1:9"}})

    asyncio.run(inside())


def test_an_empty_dataset_exits_as_the_plugin_does_with_nothing_collected(here: Path) -> None:
    (here / "data.jsonl").write_bytes(b"")
    with ScriptedAgent() as agent:
        result = run({"input": "data.jsonl", "out": "o/r.jsonl", "agents": {"p": agent.url}})
    assert result.exit_status == 5
