"""The HTML report without a browser: what it embeds, that no row's text can become markup, the
``report`` command, ``--rollouts-html`` at a session's end and ``html=`` in the Python API.

Runs are real: the Python API (or a pytest session) against a scripted agent on 127.0.0.1.
The page's own behaviour in a real browser is tests/report/test_report_browser.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_rollouts import CollectionConfig, run
from pytest_rollouts.cli import main
from pytest_rollouts.report import build_report
from pytest_rollouts.report.rollouts import SNIPPET_CAP, TEXT_CAP, final_answer, output_items, prompt_of
from pytest_rollouts.rows.schema import CREATE_PARAMS

from ..agents import Reply, ScriptedAgent
from ..helpers import embedded, run_rollouts, subprocess_run, write_rows
from .sample_run import INJECTION, LONG, ROWS, behaviour, dataset, make_run, turns


def row_of(data: dict[str, Any], task: int, rollout: int) -> int:
    """Where the table has rollout ``rollout`` of task ``task``."""
    return next(i for i, row in enumerate(data["rows"]) if row[:2] == [task, rollout])


def test_the_report_embeds_every_rollout_and_the_runs_own_numbers(here: Path) -> None:
    result = make_run(here, fail_under=0.9)
    page = build_report(here / "out/r.jsonl", score=result.score, verdict=result.verdict)
    data, details = embedded(page, "report-data"), embedded(page, "report-details")
    assert len(data["rows"]) == 2 * ROWS
    status = {(row[0], row[1]): data["statuses"][row[4]] for row in data["rows"]}
    assert status[0, 0] == "scored" and status[2, 1] == "agent_run_error" and status[4, 0] == "no_reward"
    # The run's own lines, not numbers of the report's making.
    summary = data["summary"]
    assert summary["outcomes"] == result.score.coverage.outcomes().line()
    assert summary["gates"]["measures"] == list(result.verdict.measures)
    assert summary["gates"]["exit_code"] == result.verdict.exit_code == 7
    assert any("EVAL FAILED" in p for p in summary["gates"]["problems"])
    assert summary["coverage"]["all"]["expected"] == 2 * ROWS
    assert summary["coverage"]["all"]["failed_by_class"] == {"agent_run_error": 4, "no_reward": 4}
    # A rollout opened: the prompt (once per task), each output item, the verifier's fields, the failure.
    index = row_of(data, 0, 0)
    items, verifier, failure = details["rollouts"][index]
    assert details["tasks"]["0"][0] == [["user", "What is the capital of France? (q0)"]]
    assert ["expected_answer", "Paris"] in details["tasks"]["0"][1]
    assert [kind for kind, _, _ in items] == ["call", "result", "message"]
    assert ["reward", "1.0"] in verifier and ["judge_note", "exact match"] in verifier and failure == []
    failed = row_of(data, 2, 0)
    assert ["class", "agent_run_error"] in details["rollouts"][failed][2]
    assert any(k == "response_body" and "agent broke <here>" in v for k, v in details["rollouts"][failed][2])


def test_no_rows_text_can_close_the_script_element_or_become_markup(here: Path) -> None:
    make_run(here)
    page = build_report(here / "out/r.jsonl")
    # Only the page's own three script elements end: the JSON escapes every '<' of the rows.
    assert page.count(b"</script>") == 3
    assert b"alert(1)" in page and b"<script>alert(1)" not in page and b"<!-- <b>" not in page
    details = embedded(page, "report-details")
    assert any(["judge_note", INJECTION] in verifier for _, verifier, _ in details["rollouts"])
    # The page's script never parses row text as markup.
    script = page.split(b"<script>\n", 1)[1]
    assert b"innerHTML" not in script and b"insertAdjacentHTML" not in script and b"document.write" not in script


def test_long_texts_are_cut_with_a_marker_that_says_the_cap(here: Path) -> None:
    make_run(here)
    data = embedded(build_report(here / "out/r.jsonl"), "report-data")
    details = embedded(build_report(here / "out/r.jsonl"), "report-details")
    long_row = row_of(data, 3, 0)
    message = details["rollouts"][long_row][0][-1][2]
    assert message.startswith("x" * TEXT_CAP)
    assert message.endswith(f"[truncated: {TEXT_CAP:,} of {len(LONG):,} characters shown]")
    assert data["text_cap"] == TEXT_CAP


def test_charts_are_aggregates_of_the_run(here: Path) -> None:
    result = make_run(here)
    charts = embedded(build_report(here / "out/r.jsonl"), "report-data")["charts"]
    # Scored rewards: 1.0 for n%6 in (0, 5), 0.0 for 1, 0.5 for 3; two rollouts each of two rows each.
    assert charts["rewards"]["policy"] == {"labels": ["0", "0.5", "1"], "counts": [4, 4, 8]}
    # pass@1 over tasks with a scored rollout: 4 of 8 tasks right (pass@k counts only full reward).
    assert charts["pass_k"]["policy"][0] == [1, 0.5, 8]
    assert charts["pass_k"]["policy"][1] == [2, 0.5, 8]
    # The same estimator as the metrics' pass@k, over the same scored rollouts.
    key = result.score.groups[0].metrics["key_metrics"]
    assert [charts["pass_k"]["policy"][k - 1][1] for k in (1, 2)] == [key["pass@1/reward"], key["pass@2/reward"]]
    assert charts["latency"]["n"] == 20 and sum(charts["latency"]["counts"]) == 20
    outcomes = charts["outcomes_over_run"]
    assert outcomes["statuses"][0] == "scored"
    by_status = dict(zip(outcomes["statuses"], map(sum, zip(*outcomes["buckets"], strict=True)), strict=True))
    assert by_status == {"scored": 16, "agent_run_error": 4, "no_reward": 4}


def test_report_command_writes_the_page_from_the_files(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = make_run(here)
    code = main(["report", "out/r.jsonl", "-o", "site/report.html", "--fail-under", "0.9"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip() == "report: site/report.html"
    data = embedded((here / "site/report.html").read_bytes(), "report-data")
    # Coverage and metrics as the run wrote them into its metrics file.
    assert data["summary"]["outcomes"] == result.score.coverage.outcomes().line()
    assert data["summary"]["groups"][0]["mean_reward"] == pytest.approx(result.mean_reward)
    assert data["summary"]["gates"]["measures"] == [
        f"--fail-under 0.9: mean reward {result.mean_reward:.4f} over 16 rollouts"
    ]
    assert data["summary"]["gates"]["exit_code"] == 7
    # Without -o: beside the run.
    assert main(["report", "out/r.jsonl"]) == 0
    assert (here / "out/r_report.html").is_file()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["report", "missing/r.jsonl"], "RUN: missing/r.jsonl is not there"),
        (["report", "out/r.jsonl", "--baseline", "old/r.jsonl"], "--baseline: old/r.jsonl is not there"),
        (["report", "out/r.jsonl", "-o", "out"], "-o: out is a directory"),
        (["report", "out/r.jsonl", "--fail-under", "nan"], "--fail-under: must be a finite number"),
        (["report", "out/r.jsonl", "--bassline", "x"], "did you mean --baseline?"),
    ],
)
def test_report_command_refuses_bad_arguments_with_exit_4(
    here: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    make_run(here)
    capsys.readouterr()
    try:
        code = main(args)
    except SystemExit as stop:  # argparse's refusals exit from inside the parser
        code = stop.code
    assert code == 4
    assert said in capsys.readouterr().err
    assert not list(here.glob("**/*.html"))


def test_a_materialized_file_missing_is_named(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_run(here)
    (here / "out/r_materialized_inputs.jsonl").unlink()
    assert main(["report", "out/r.jsonl"]) == 4
    assert "out/r_materialized_inputs.jsonl is not there" in capsys.readouterr().err


def test_the_baseline_adds_the_paired_comparison_and_the_flipped_tasks(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(here, out="base/r.jsonl", flipped=True)
    make_run(here)
    assert main(["report", "out/r.jsonl", "--baseline", "base/r.jsonl", "-o", "report.html"]) == 0
    data = embedded((here / "report.html").read_bytes(), "report-data")
    [group] = data["summary"]["baseline"]["groups"]
    # n%6 == 1 broke (1 -> 0) and n%6 == 5 was fixed (0 -> 1): tasks 1, 7 and 5, 11.
    assert sorted(label for label, _, _ in group["broke"]) == ["1", "7"]
    assert sorted(label for label, _, _ in group["fixed"]) == ["11", "5"]
    assert data["summary"]["baseline"]["lines"][0].endswith("paired by task index")
    assert data["task_labels"]["7"] == 7


def test_the_python_api_writes_the_report_when_asked(here: Path) -> None:
    result = make_run(here, html="out/report.html")
    assert result.report == f"report written to {here / 'out/report.html'}"
    assert result.report in result.summary()
    assert embedded((here / "out/report.html").read_bytes(), "report-data")["summary"]["gates"]["exit_code"] == 0


def test_a_report_that_cannot_be_written_leaves_the_run_and_its_status(here: Path) -> None:
    (here / "blocked").write_text("a file where the report's folder would be")
    result = make_run(here, html="blocked/report.html")
    assert result.exit_status == 0
    assert result.report.startswith(f"the report could not be written to {here / 'blocked/report.html'}: ")
    assert result.report.endswith("the run's results are unaffected")
    assert (here / "out/r_aggregate_metrics.json").is_file()


def test_rollouts_html_writes_the_report_at_the_end_of_a_session(pytester: pytest.Pytester) -> None:
    dataset(pytester.path)
    with ScriptedAgent(behaviour()) as agent:
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={agent.url}",
            "--rollouts-retries=0",
            "--rollouts-html=site/r.html",
        )
    assert result.ret == 0, result.outlines[-20:]
    result.stdout.fnmatch_lines(["rollouts: report written to site/r.html"])
    data = embedded((pytester.path / "site/r.html").read_bytes(), "report-data")
    assert len(data["rows"]) == ROWS
    assert data["summary"]["outcomes"] == "8 of 12 rollouts scored; no_reward 2; failed: agent_run_error 2"


def test_a_session_whose_report_fails_keeps_its_results_and_exit_status(pytester: pytest.Pytester) -> None:
    dataset(pytester.path)
    (pytester.path / "blocked").write_text("a file")
    with ScriptedAgent(behaviour()) as agent:
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={agent.url}",
            "--rollouts-retries=0",
            "--rollouts-html=blocked/r.html",
        )
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["rollouts: the report could not be written to blocked/r.html: *; the run's results are unaffected"]
    )
    assert (pytester.path / "out/r_aggregate_metrics.json").is_file()


def test_rollouts_html_naming_a_directory_is_a_usage_error(pytester: pytest.Pytester) -> None:
    dataset(pytester.path)
    (pytester.path / "site").mkdir()
    result = run_rollouts(pytester, "data.jsonl", "--rollouts-agent=http://127.0.0.1:9", "--rollouts-html=site")
    assert result.ret == 4
    assert "--rollouts-html" in result.stderr.str() + result.stdout.str()


def test_under_xdist_only_the_controller_writes_the_report(tmp_path: Path) -> None:
    dataset(tmp_path)
    with ScriptedAgent(behaviour()) as agent:
        done = subprocess_run(tmp_path, agent.url, "-n", "2", "--rollouts-retries=0", "--rollouts-html=r.html")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.count("rollouts: report written to r.html") == 1
    assert len(embedded((tmp_path / "r.html").read_bytes(), "report-data")["rows"]) == ROWS
    assert sorted(p.name for p in tmp_path.glob("*.html")) == ["r.html"] and not list(tmp_path.glob(".r.html.*"))


def test_the_tables_answer_says_the_length_of_the_whole_answer(here: Path) -> None:
    make_run(here)
    data = embedded(build_report(here / "out/r.jsonl"), "report-data")
    answer = data["rows"][row_of(data, 3, 0)][7]
    assert answer == f"{'x' * SNIPPET_CAP} … [truncated: {SNIPPET_CAP} of {len(LONG):,} characters shown]"


def test_the_tables_answer_is_cut_from_the_whole_answer_not_from_the_drawers_cut(here: Path) -> None:
    # An answer that itself ends like a cut text, and one padded with whitespace the table drops:
    # the table's marker counts the answer it shows, stripped, never a length read from its text.
    quoted = "z" * 300 + " … [truncated: 5 of 99,999 characters shown]"
    padded = "  \n" + "y" * 2100 + " " * 300
    write_rows(here / "data.jsonl", [{"n": n, "responses_create_params": {"input": "q"}} for n in range(2)])
    with ScriptedAgent(lambda row, seen: Reply(json=turns(1.0, (quoted, padded)[row["n"]]))) as agent:
        run(CollectionConfig(input=str(here / "data.jsonl"), out=str(here / "r.jsonl"), agents={"policy": agent.url}))
    data = embedded(build_report(here / "r.jsonl"), "report-data")
    cut = f" … [truncated: {SNIPPET_CAP} of {{:,}} characters shown]"
    assert data["rows"][row_of(data, 0, 0)][7] == quoted[:SNIPPET_CAP] + cut.format(len(quoted))
    assert data["rows"][row_of(data, 1, 0)][7] == "y" * SNIPPET_CAP + cut.format(2100)


def test_what_is_not_responses_shaped_is_shown_as_it_came() -> None:
    chat = {"choices": [{"message": {"role": "assistant", "content": "chat answer"}}]}
    for response in (chat, "just a string", {"output": "not a list"}):
        items = output_items(response)
        assert items == [["raw", "", json.dumps(response, indent=2)]]
        assert final_answer(response) == items[0][2]
    assert output_items(None) == []
    assert prompt_of({CREATE_PARAMS: {"input": 42}}) == [["input", "42"]]
    assert prompt_of({CREATE_PARAMS: {"input": {"a": 1}, "instructions": "be brief"}}) == [
        ["instructions", "be brief"],
        ["input", '{"a":1}'],
    ]
    reasoning = {"type": "reasoning", "summary": [{"text": "in short"}], "content": [{"text": "at length"}]}
    assert output_items({"output": [reasoning]}) == [["reasoning", "", "in short\nat length"]]
