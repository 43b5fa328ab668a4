"""``-k`` on row fields a suite lists under ``keywords`` in its rollouts.toml."""

from __future__ import annotations

import pytest

from ..agents import ScriptedAgent
from ..helpers import run_rollouts, write_rows


def suite(pytester: pytest.Pytester, url: str, keywords: str) -> None:
    rows = [
        {
            "task_id": f"t{n}",
            "difficulty": "hard" if n % 2 else "easy",
            "meta": {"difficulty": "hard"},
            "responses_create_params": {"input": f"q{n}"},
        }
        for n in range(4)
    ]
    write_rows(pytester.path / "suite" / "data.jsonl", rows)
    toml = f'datasets = ["data.jsonl"]\nagent = "x"\n{keywords}\n[agents.x]\nurl = "{url}"\n'
    (pytester.path / "suite" / "rollouts.toml").write_text(toml)


def test_k_selects_rows_by_a_listed_field_and_runs_only_them(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    suite(pytester, agent.url, 'keywords = ["difficulty", "task_id"]')
    result = run_rollouts(pytester, "suite", "-k", "hard")
    result.assert_outcomes(passed=2, deselected=2)
    assert sorted(r["task_id"] for r in agent.requests) == ["t1", "t3"]
    result = run_rollouts(pytester, "suite", "-k", "t2 or t3", "--co", "-q")
    assert "suite/data.jsonl::task[2]" in result.stdout.str() and "suite/data.jsonl::task[3]" in result.stdout.str()
    assert "task[0]" not in result.stdout.str()


def test_fields_the_suite_does_not_list_are_no_keywords(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    suite(pytester, agent.url, 'keywords = ["task_id"]')
    result = run_rollouts(pytester, "suite", "-k", "hard", "--co", "-q")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, "difficulty is not listed; a nested field never is"


def test_an_unknown_suite_key_near_keywords_is_named(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    suite(pytester, agent.url, 'keyword = ["task_id"]')
    result = run_rollouts(pytester, "suite")
    assert "keyword: unknown key, did you mean 'keywords'?" in result.stdout.str() + result.stderr.str()
