"""The shipped suites (``evalsuites/``): generators reproduce the committed data, verifiers score
right, wrong and malformed answers as documented, the tools work and are safe, and the seeded
baseline model gives every suite a reproducible spread of scores (the offline-sanity check)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..suites import EVALSUITES, SUITES, BaselineModel, Suite, load, rewards


@pytest.fixture(scope="module")
def model() -> Iterator[BaselineModel]:
    with BaselineModel() as server:
        yield server


def message(text: str, *items: dict[str, Any]) -> dict[str, Any]:
    """A final response in Responses API shape: ``items`` and then an assistant message."""
    final = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    return {"id": "r", "object": "response", "model": "m", "output": [*items, final], "usage": {}}


MALFORMED: list[Any] = [
    {},
    {"output": None},
    {"output": "text"},
    {"output": [None, 3, {"type": "message", "content": None}]},
    {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": 7}]}]},
    {"output": [{"type": "function_call", "name": "lookup", "arguments": "{not json", "call_id": "c"}]},
    message(""),
]


def reward(result: Any) -> float:
    return float(result["reward"] if isinstance(result, dict) else result)


# -- data ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SUITES)
def test_generator_reproduces_the_committed_data(name: str, tmp_path: Path) -> None:
    suite = EVALSUITES / name
    args = [sys.executable, str(suite / "generate.py"), "--out", str(tmp_path / "data.jsonl")]
    if name == "tool_use":
        args += ["--facts", str(tmp_path / "facts.json")]
    subprocess.run(args, check=True, capture_output=True)
    assert (tmp_path / "data.jsonl").read_bytes() == (suite / "data.jsonl").read_bytes()
    if name == "tool_use":
        assert (tmp_path / "facts.json").read_bytes() == (suite / "facts.json").read_bytes()


@pytest.mark.parametrize("name", SUITES)
def test_suite_has_at_least_100_distinct_tasks_and_a_new_format_declaration(name: str) -> None:
    suite = Suite(name)
    assert len(suite.rows) >= 100
    prompts = {json.dumps(row["responses_create_params"], sort_keys=True) for row in suite.rows}
    assert len(prompts) == len(suite.rows)
    assert {row["difficulty"] for row in suite.rows} == {1, 2, 3}
    config = tomllib.loads((EVALSUITES / name / "rollouts.toml").read_text())
    agent = config["agents"][config["agent"]]
    assert agent["model_embedded"] == "../baseline_model.py:make_app"
    assert agent["model_name"] == "seeded-baseline" and agent["api"] in ("chat", "responses")
    assert "embedded" not in agent, "the suites run on the built-in model agent, not a hand-written one"


def test_both_apis_are_exercised_offline() -> None:
    assert {Suite(name).agent["api"] for name in SUITES} == {"chat", "responses"}


def test_arithmetic_data_is_the_same_120_tasks() -> None:
    rows = Suite("arithmetic").rows
    assert len(rows) == 120
    assert rows[0]["expected_answer"] == "3002" and "38 * 79" in json.dumps(rows[0])


def test_tool_use_answers_follow_from_the_fact_table() -> None:
    suite = Suite("tool_use")
    for row in suite.rows:
        values = [int(suite.tools["lookup"](key)) for key in row["required_lookups"]]
        expected = int(row["expected_answer"])
        if row["kind"] in ("sum", "area3"):
            assert expected == sum(values)
        elif row["kind"] == "gap":
            assert expected == abs(values[0] - values[1])
        elif row["kind"] == "density":
            assert expected == values[0] // values[1]
        else:
            assert 0 < expected < 1300


def test_structured_expected_values_conform_to_their_schema() -> None:
    from jsonschema import Draft202012Validator

    for row in Suite("structured").rows:
        Draft202012Validator.check_schema(row["schema"])
        assert Draft202012Validator(row["schema"]).is_valid(row["expected"])


# -- verifiers -------------------------------------------------------------------------------------


def test_arithmetic_verifier() -> None:
    suite = Suite("arithmetic")
    row = suite.rows[0]
    right = suite.score(row, message(f"38 * 79 = 3002, so \\boxed{{{row['expected_answer']}}}"))
    assert right == {"reward": 1.0, "extracted_answer": "3002"}
    assert suite.score(row, message("\\boxed{3001}")) == {"reward": 0.0, "extracted_answer": "3001"}
    assert reward(suite.score(row, message("3002"))) == 0.0, "no box, no credit"
    assert reward(suite.score(row, message("\\boxed{1} then \\boxed{3002}"))) == 1.0, "the last box counts"
    for bad in MALFORMED:
        assert reward(suite.score(row, bad)) == 0.0


def tool_items(*calls: tuple[str, str, str]) -> list[dict[str, Any]]:
    items = []
    for i, (name, arguments, output) in enumerate(calls):
        items.append({"type": "function_call", "call_id": f"c{i}", "name": name, "arguments": arguments})
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": output})
    return items


def test_tool_use_verifier() -> None:
    suite = Suite("tool_use")
    row = next(r for r in suite.rows if r["kind"] == "sum")
    lookup = suite.tools["lookup"]
    keys = row["required_lookups"]
    lookups = [("lookup", json.dumps({"key": k}), lookup(k)) for k in keys]
    expression = " + ".join(lookup(k) for k in keys)
    calc = ("calculator", json.dumps({"expression": expression}), suite.tools["calculator"](expression))
    answer = f"\\boxed{{{row['expected_answer']}}}"

    right = suite.score(row, message(answer, *tool_items(*lookups, calc)))
    assert right["reward"] == 1.0 and right["used_calculator"] and right["missing_lookups"] == []
    assert right["tool_calls"] == 3
    unaided = suite.score(row, message(answer, *tool_items(*lookups)))
    assert unaided["reward"] == 1.0 and not unaided["used_calculator"], "the calculator is optional"

    guessed = suite.score(row, message(answer))
    assert guessed["reward"] == 0.0 and guessed["missing_lookups"] == sorted(keys), "a right number without the facts"
    half = suite.score(row, message(answer, *tool_items(lookups[0], calc)))
    assert half["reward"] == 0.0 and half["missing_lookups"] == [keys[1]]
    failed = [("lookup", json.dumps({"key": k}), "error: no city") for k in keys]
    assert suite.score(row, message(answer, *tool_items(*failed)))["reward"] == 0.0, "a failed look-up is no fact"
    wrong = suite.score(row, message("\\boxed{12}", *tool_items(*lookups, calc)))
    assert wrong["reward"] == 0.0 and wrong["extracted_answer"] == "12"
    for bad in MALFORMED:
        assert reward(suite.score(row, bad)) == 0.0


def test_structured_verifier_gives_credit_per_field() -> None:
    suite = Suite("structured")
    row = next(r for r in suite.rows if r["difficulty"] == 2)
    expected = row["expected"]
    assert len(expected) == 6

    right = suite.score(row, message(json.dumps(expected)))
    assert right["reward"] == 1.0 and right["schema_valid"] and set(right["field_credit"].values()) == {1}
    fenced = suite.score(row, message("Here it is:\n```json\n" + json.dumps(expected, indent=2) + "\n```"))
    assert fenced["reward"] == 1.0
    shuffled = dict(expected, interests=list(reversed(expected["interests"])))
    assert suite.score(row, message(json.dumps(shuffled)))["reward"] == 1.0, "interests in any order"

    typed = dict(expected, age=str(expected["age"]))  # right value, wrong type: fails its subschema
    result = suite.score(row, message(json.dumps(typed)))
    assert result["reward"] == pytest.approx(5 / 6) and not result["schema_valid"]
    assert result["field_credit"]["age"] == 0
    two_wrong = {k: v for k, v in expected.items() if k != "email"} | {"age": expected["age"] + 1}
    assert suite.score(row, message(json.dumps(two_wrong)))["reward"] == pytest.approx(4 / 6)
    extra = dict(expected, nickname="x")
    result = suite.score(row, message(json.dumps(extra)))
    assert result["reward"] == 1.0 and not result["schema_valid"], "an extra property breaks the schema, not a field"
    assert suite.score(row, message(json.dumps({k: "?" for k in expected})))["reward"] == 0.0

    for bad in [*MALFORMED, message('{"name": "Ada'), message("[1, 2]"), message("no json here")]:
        result = suite.score(row, bad)
        assert result["reward"] == 0.0 and not result["valid_json"]


# -- tools -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tools() -> dict[str, Any]:
    return Suite("tool_use").tools


def test_tools_are_documented_and_typed(tools: dict[str, Any]) -> None:
    assert set(tools) == {"calculator", "lookup"}
    for func in tools.values():
        assert func.__doc__ and func.__doc__.strip()
        assert func.__annotations__["return"] in (str, "str")


@pytest.mark.parametrize(
    ("expression", "result"),
    [
        ("(1200 - 845) * 3", "1065"),
        ("7 / 2", "3.5"),
        ("7 // 2", "3"),
        ("-2 ** 3", "-8"),
        ("10 % 4", "2"),
        ("1.5 * 4", "6"),
        (" 1 + 2 ", "3"),
    ],
)
def test_calculator_computes(tools: dict[str, Any], expression: str, result: str) -> None:
    assert tools["calculator"](expression) == result


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('echo hacked')",
        "open('/etc/passwd').read()",
        "(1).__class__",
        "x + 1",
        "[1, 2]",
        "'a' * 3",
        "lambda: 1",
        "2 ** 10000",
        "9 ** 9 ** 9",
        "1 / 0",
        "(-8) ** 0.5",
        "1 +",
        "",
        "1" * 500,
        "True + 1",
    ],
)
def test_calculator_refuses_what_is_not_arithmetic(tools: dict[str, Any], expression: str) -> None:
    assert tools["calculator"](expression).startswith("error: ")


def test_lookup(tools: dict[str, Any]) -> None:
    facts = json.loads((EVALSUITES / "tool_use" / "facts.json").read_text())
    city, values = next(iter(facts.items()))
    assert tools["lookup"](f"{city}.population") == str(values["population"])
    assert tools["lookup"](f"  {city.upper()}.Founded ") == str(values["founded"]), "case and spaces do not matter"
    assert tools["lookup"]("Atlantis.population").startswith("error: no city")
    assert tools["lookup"](f"{city}.mayor").startswith("error: a key is")
    assert tools["lookup"]("population").startswith("error: ")


def test_the_suite_files_load_on_their_own() -> None:
    """The plugin loads them by path; nothing in them may need the repository on sys.path."""
    for path in [*sorted(EVALSUITES.glob("*/verify.py")), EVALSUITES / "tool_use" / "tools.py"]:
        assert load(path)


# -- offline sanity: the baseline model over each whole suite ------------------------------------


@pytest.mark.parametrize("name", SUITES)
def test_baseline_scores_spread_and_reproduce(model: BaselineModel, name: str) -> None:
    """A hand-rolled loop (model, tools, model..., verifier) over every task: a mean neither near 0
    nor near 1, harder tasks scoring lower, and the same scores on a second run."""
    suite = Suite(name)
    first = rewards(model.base_url, suite)
    assert 0.2 < statistics.mean(first) < 0.95, statistics.mean(first)
    assert rewards(model.base_url, suite) == first
    other = rewards(model.base_url, suite, repeat=1)
    assert other != first, "another repeat of the same tasks scores differently somewhere"
    # Over both repeats, so that two dozen tasks per level are not left to chance alone.
    by_difficulty = {
        d: statistics.mean(
            r for rs in (first, other) for r, row in zip(rs, suite.rows, strict=True) if row["difficulty"] == d
        )
        for d in (1, 2, 3)
    }
    assert by_difficulty[1] > by_difficulty[3], by_difficulty
