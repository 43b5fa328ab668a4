"""Prompt templates (NeMo Gym's ``prompt_config``): each row's ``responses_create_params.input``
built at materialization from a YAML template, from a suite, a head server's dataset entry, the
option or the Python API; its hash in the manifest, so a changed template is a changed input."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from pytest_rollouts import CollectionConfig, CollectionRefused, run_from_config
from pytest_rollouts.rows.prompts import PromptError, load_template

from ..agents import ScriptedAgent
from ..helpers import Artifacts, port, run_rollouts, write_rows

TEMPLATE = """\
system: You are terse. Topic {topic}.
few_shot:
  - {role: user, content: "1 + 1?"}
  - {role: assistant, content: "2"}
user: |-
  Answer in \\boxed{{}}: {question}
"""

EXPECTED_INPUT = [
    {"role": "system", "content": "You are terse. Topic math."},
    {"role": "user", "content": "1 + 1?"},
    {"role": "assistant", "content": "2"},
    {"role": "user", "content": "Answer in \\boxed{}: 2 + 2?"},
]


def _rows(n: int = 2) -> list[dict]:
    """Rows with fields only, no request input: the template builds it (other request fields stay)."""
    return [
        {"question": "2 + 2?", "topic": "math", "expected_answer": "4", "responses_create_params": {"temperature": 0.5}}
        for _ in range(n)
    ]


def _suite(root: Path, url: str, template: str = TEMPLATE) -> Path:
    suite = root / "suite"
    suite.mkdir(exist_ok=True)
    declaration = 'datasets = ["data.jsonl"]\nagent = "policy"\nprompt_config = "prompt.yaml"\n'
    (suite / "rollouts.toml").write_text(declaration + f'\n[agents.policy]\nurl = "{url}"\n')
    (suite / "prompt.yaml").write_text(template)
    write_rows(suite / "data.jsonl", _rows())
    return suite


def test_a_suites_template_builds_the_input_that_is_materialized_and_sent(pytester: pytest.Pytester) -> None:
    with ScriptedAgent() as agent:
        _suite(pytester.path, agent.url)
        run_rollouts(pytester, "suite").assert_outcomes(passed=2)
        sent = [request["responses_create_params"] for request in agent.requests]
    assert sent == [{"temperature": 0.5, "input": EXPECTED_INPUT}] * 2
    materialized = Artifacts(pytester.path).materialized
    assert [row["responses_create_params"]["input"] for row in materialized] == [EXPECTED_INPUT] * 2
    [entry] = orjson.loads((pytester.path / "out/r_run_manifest.json").read_bytes())["datasets"]
    assert entry["prompt_config"] == "suite/prompt.yaml"
    assert entry["prompt_sha256"] == load_template(pytester.path / "suite/prompt.yaml").sha256


def test_a_resume_with_a_changed_template_is_refused_and_sends_nothing(pytester: pytest.Pytester) -> None:
    with ScriptedAgent() as agent:
        suite = _suite(pytester.path, agent.url)
        run_rollouts(pytester, "suite").assert_outcomes(passed=2)
        # Only a comment and layout: the same template, so the resume goes on (nothing left to send).
        (suite / "prompt.yaml").write_text("# reworded nothing\n" + TEMPLATE)
        run_rollouts(pytester, "suite", "--rollouts-resume").assert_outcomes(passed=2)
        agent.requests.clear()
        (suite / "prompt.yaml").write_text(TEMPLATE.replace("terse", "verbose"))
        result = run_rollouts(pytester, "suite", "--rollouts-resume")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            [
                "*the input changed*",
                "*dataset suite/data.jsonl's prompt template changed: recorded suite/prompt.yaml sha256 *",
            ]
        )
        assert agent.requests == []


def test_a_row_without_a_placeholders_field_is_refused_naming_file_and_line(pytester: pytest.Pytester) -> None:
    with ScriptedAgent() as agent:
        suite = _suite(pytester.path, agent.url)
        rows = _rows(3)
        del rows[1]["question"]
        write_rows(suite / "data.jsonl", rows)
        result = run_rollouts(pytester, "suite")
        # The template and the row disagree: a usage error (it was a collection error, exit 2).
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            ["*suite/data.jsonl:2: the prompt template suite/prompt.yaml uses {question}, which the row lacks*"]
        )
        assert agent.requests == []
        assert not (pytester.path / "out/r_materialized_inputs.jsonl").exists()


def test_the_option_overrides_and_a_row_with_its_own_input_is_refused(pytester: pytest.Pytester) -> None:
    """``--rollouts-prompt-config`` as NeMo Gym's ``+prompt_config=``; a row that already has an
    input excludes a template, as NeMo Gym's ``validate_prompt_compatibility`` says."""
    (pytester.path / "other.yaml").write_text("user: 'Q: {question}'\n")
    with ScriptedAgent() as agent:
        _suite(pytester.path, agent.url)
        run_rollouts(pytester, "suite", "--rollouts-prompt-config=other.yaml").assert_outcomes(passed=2)
        assert [r["responses_create_params"]["input"] for r in agent.requests] == [
            [{"role": "user", "content": "Q: 2 + 2?"}]
        ] * 2
        write_rows(pytester.path / "given.jsonl", [{"question": "x", "responses_create_params": {"input": "x"}}])
        agent.requests.clear()
        result = run_rollouts(
            pytester, "given.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-prompt-config=other.yaml"
        )
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["*given.jsonl:1: the row has responses_create_params.input and the run has*"])
        assert agent.requests == []


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("system: hi\n", "user: Field required"),
        ("user: [unclosed\n", "not valid YAML"),
        ("user: hi\nfew_shot: [{role: robot, content: x}]\n", "few_shot.0.role"),
        ("user: hi\nshots: []\n", "shots: Extra inputs are not permitted"),
        ("user: '{question.upper}'\n", "uses {question.upper}: a placeholder names a row field"),
    ],
)
def test_a_template_that_cannot_be_used_is_a_usage_error(pytester: pytest.Pytester, text: str, said: str) -> None:
    (pytester.path / "p.yaml").write_text(text)
    write_rows(pytester.path / "data.jsonl", _rows(1))
    result = run_rollouts(
        pytester, "data.jsonl", "--rollouts-agent=http://127.0.0.1:1", "--rollouts-prompt-config=p.yaml"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--rollouts-prompt-config*{said}*"])
    with pytest.raises(PromptError, match=said.split(":")[0]):
        load_template(pytester.path / "p.yaml")


def test_a_suites_template_that_is_not_text_or_meets_a_run_level_input_is_refused(pytester: pytest.Pytester) -> None:
    with ScriptedAgent() as agent:
        suite = _suite(pytester.path, agent.url)
        create_params = '--rollouts-responses-create-params={"input": "run level"}'
        result = run_rollouts(pytester, "suite", create_params)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            ["*suite/data.jsonl: its prompt template (*prompt.yaml) builds each row's input, and the run's*"]
        )
        (suite / "prompt.yaml").write_bytes(b"user: '\xff {question}'\n")
        result = run_rollouts(pytester, "suite")
        result.stdout.fnmatch_lines(["*the prompt template *prompt.yaml is not UTF-8 text*"])
        assert "Traceback" not in result.stdout.str() and "UnicodeDecodeError" not in result.stdout.str()
        assert agent.requests == []


def test_a_head_servers_dataset_entry_names_the_template(pytester: pytest.Pytester, head_server) -> None:
    _, state = head_server
    (pytester.path / "prompts").mkdir()
    (pytester.path / "prompts/math.yaml").write_text(TEMPLATE)
    write_rows(pytester.path / "data/bench.jsonl", _rows())
    with ScriptedAgent() as agent:
        state["yaml"] = f"""\
math_agent:
  responses_api_agents:
    simple_agent:
      host: 127.0.0.1
      port: {port(agent.url)}
      datasets:
        - {{name: m, type: benchmark, jsonl_fpath: data/bench.jsonl, prompt_config: prompts/math.yaml}}
"""
        head = f"--rollouts-head-server={state['address']}"
        result = run_rollouts(pytester, "data/bench.jsonl", head, "--rollouts-agent-map=_default=math_agent")
        result.assert_outcomes(passed=2)
        assert [r["responses_create_params"]["input"] for r in agent.requests] == [EXPECTED_INPUT] * 2


def test_the_python_api_takes_a_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.yaml").write_text(TEMPLATE)
    write_rows(tmp_path / "data.jsonl", _rows())
    with ScriptedAgent() as agent:
        given = {"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"policy": agent.url}}
        result = asyncio.run(run_from_config(CollectionConfig(**given, prompt_config="p.yaml")))
        assert result.exit_status == 0
        assert [r["responses_create_params"]["input"] for r in agent.requests] == [EXPECTED_INPUT] * 2
        (tmp_path / "p.yaml").write_text(TEMPLATE.replace("terse", "verbose"))
        with pytest.raises(CollectionRefused, match="prompt template changed"):
            asyncio.run(run_from_config(CollectionConfig(**given, prompt_config="p.yaml", resume=True)))
        (tmp_path / "q.yaml").write_text("user: '{nothing}'\n")
        with pytest.raises(CollectionRefused, match=r"data.jsonl:1: the prompt template q.yaml uses \{nothing\}"):
            asyncio.run(run_from_config(CollectionConfig(**given, prompt_config="q.yaml")))


def test_under_xdist_every_worker_builds_the_same_inputs(pytester: pytest.Pytester) -> None:
    """Each worker materializes the same rows: with a template, a split and the inputs moved, the
    run is still one (every rollout once, the manifest's split and template recorded once)."""
    with ScriptedAgent() as agent:
        suite = _suite(pytester.path, agent.url)
        write_rows(suite / "data.jsonl", _rows(12))
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-p", "no:asyncio", "-n", "2", "suite",
            "--rollouts-out=out/r.jsonl", "--rollouts-materialized=inputs/m.jsonl", "--rollouts-repeats=2",
        )  # fmt: skip
        result.assert_outcomes(passed=12)
        assert sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in agent.requests) == [
            (t, r) for t in range(12) for r in range(2)
        ]
        assert all(r["responses_create_params"]["input"] == EXPECTED_INPUT for r in agent.requests)
    materialized = [orjson.loads(line) for line in (pytester.path / "inputs/m.jsonl").read_bytes().splitlines()]
    assert len(materialized) == 24 and all(
        r["responses_create_params"]["input"] == EXPECTED_INPUT for r in materialized
    )
    [entry] = orjson.loads((pytester.path / "out/r_run_manifest.json").read_bytes())["datasets"]
    assert entry["prompt_sha256"] == load_template(suite / "prompt.yaml").sha256
