"""The report in a real browser: Debian's Chromium, driven by Playwright, opens the file.

Never a downloaded browser and never the network: the page is a local file and Chromium is told
not to reach out (its background services would try). Without /usr/bin/chromium or the
``playwright`` package these tests skip, saying which is missing; tests/report/test_report.py still runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from pytest_rollouts import CollectionConfig, CollectionWarning, run
from pytest_rollouts.cli import main

from ..agents import Reply, ScriptedAgent
from ..helpers import write_rows
from .sample_run import ROWS, make_run

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPEATS = 6  # 72 rollouts: more than one page of the table (50 a page)

if not Path(CHROMIUM).is_file():
    pytest.skip(
        f"{CHROMIUM} is not installed (Debian's chromium package): no browser to test in", allow_module_level=True
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with failures, markup in its answers and a baseline it broke and fixed tasks against."""
    root = tmp_path_factory.mktemp("report")
    make_run(root, out="base/r.jsonl", flipped=True, repeats=REPEATS)
    make_run(root, repeats=REPEATS)
    path = root / "report.html"
    assert main(["report", str(root / "out/r.jsonl"), "--baseline", str(root / "base/r.jsonl"), "-o", str(path)]) == 0
    return path


def _answer(text: str) -> dict[str, Any]:
    return {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}


# Rows whose agent replies with their ``reply``: responses of other shapes than Responses', prompts
# that are not messages, a masked zero and a scored one. Each row ``SHAPE_REPEATS`` times.
SHAPES = [
    (
        {"input": "q"},
        {"reward": 1.0, "response": {"choices": [{"message": {"role": "assistant", "content": "chat answer"}}]}},
    ),
    ({"input": "q"}, {"reward": 1.0, "response": "just a string"}),
    ({"input": "q"}, {"reward": 1.0, "response": {"output": "not a list"}}),
    (
        {"input": 42},
        {
            "reward": 1.0,
            "response": {
                "output": [
                    {
                        "type": "reasoning",
                        "summary": [{"type": "summary_text", "text": "in short"}],
                        "content": [{"type": "reasoning_text", "text": "thinking it through"}],
                    },
                    *_answer("42")["output"],
                ]
            },
        },
    ),
    (None, {"reward": 1.0, "response": _answer("no prompt")}),
    ({"input": {"weird": "dict"}}, {"reward": 1.0, "response": _answer("dict")}),
    ({"input": "q"}, {"reward": 0.0, "mask_sample": True, "response": _answer("masked zero")}),
    ({"input": "q"}, {"reward": 0.0, "response": _answer("scored zero")}),
    ({"input": "q"}, {"reward": 1.0, "response": _answer("right")}),
]
SHAPE_REPEATS = 8  # 72 results: latency buckets of 2, the last one ending at the 72nd


def _report_of(root: Path, rows: list[dict[str, Any]], behaviour: Any, repeats: int) -> Path:
    """A run of ``rows`` against ``behaviour`` through the Python API, and its report."""
    write_rows(root / "data.jsonl", rows)
    with (
        ScriptedAgent(behaviour) as agent,
        pytest.warns(CollectionWarning) if any("responses_create_params" not in row for row in rows) else nullcontext(),
    ):
        run(
            CollectionConfig(
                input=str(root / "data.jsonl"),
                out=str(root / "out/r.jsonl"),
                agents={"policy": agent.url},
                repeats=repeats,
                retries=0,
            )
        )
    path = root / "report.html"
    assert main(["report", str(root / "out/r.jsonl"), "-o", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = [
        {"n": n, "reply": reply, **({} if params is None else {"responses_create_params": params})}
        for n, (params, reply) in enumerate(SHAPES)
    ]
    return _report_of(
        tmp_path_factory.mktemp("shapes"), rows, lambda row, seen: Reply(json=row["reply"]), SHAPE_REPEATS
    )


@pytest.fixture(scope="module")
def all_failed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = [{"n": n, "responses_create_params": {"input": "q"}} for n in range(3)]
    return _report_of(
        tmp_path_factory.mktemp("failed"), rows, lambda row, seen: Reply(status=500, json={"detail": "x"}), 1
    )


@pytest.fixture(scope="module")
def browser(report: Path, shapes: Path, all_failed: Path) -> Iterator[Any]:
    """After the runs: Playwright's sync API keeps an event loop running, where ``run`` would refuse."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


class Page:
    """One tab on the report, with every console error, page error and dialog it raised."""

    def __init__(self, browser: Any, report: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1300, "height": 900})
        self.problems: list[str] = []
        self.page.on(
            "console", lambda m: self.problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None
        )
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("dialog", lambda d: (self.problems.append(f"dialog: {d.message}"), d.dismiss()))
        self.page.on(
            "request", lambda r: None if r.url.startswith("file://") else self.problems.append(f"request {r.url}")
        )
        self.page.goto(report.as_uri())

    def rows(self) -> list[list[str]]:
        return [
            row.split("\t")
            for row in self.page.locator("#rollouts tbody tr").evaluate_all(
                "rows => rows.map(r => [...r.cells].map(c => c.textContent).join('\\t'))"
            )
        ]

    def count(self) -> str:
        return self.page.locator("#t-count").text_content() or ""


@pytest.fixture
def tab(browser: Any, report: Path) -> Iterator[Page]:
    page = Page(browser, report)
    yield page
    assert page.problems == []
    page.page.close()


def test_the_page_loads_clean_and_draws_its_charts(tab: Page, tmp_path: Path) -> None:
    page = tab.page
    assert page.locator("#verdict").text_content() == "passed"
    scored = f"{8 * REPEATS} of {ROWS * REPEATS}"
    failed = f"no_reward {2 * REPEATS}; failed: agent_run_error {2 * REPEATS}"
    assert page.locator("#coverage-line").text_content() == f"{scored} rollouts scored; {failed}"
    for chart in ("chart-rewards", "chart-passk", "chart-latency", "chart-latency-run", "chart-outcomes"):
        assert page.locator(f"#{chart} .mark").count() > 0, chart
    # Three reward values (0, 0.5, 1), one bar each; pass@k at k = 1..6.
    assert page.locator("#chart-rewards rect.mark").count() == 3
    assert page.locator("#chart-passk circle.mark").count() == REPEATS
    assert "policy: mean reward" in (page.locator("#score-lines").text_content() or "")
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert (tmp_path / "report.png").stat().st_size > 0


def test_the_table_pages_filters_and_sorts(tab: Page) -> None:
    page = tab.page
    assert tab.count() == f"{ROWS * REPEATS} of {ROWS * REPEATS} rollouts"
    assert len(tab.rows()) == 50
    page.click("#t-next")
    assert len(tab.rows()) == ROWS * REPEATS - 50 and page.locator("#t-page").text_content() == "page 2 of 2"
    page.fill("#f-text", "paris")  # the answers of kinds 0 and 5
    assert tab.count() == f"{4 * REPEATS} of {ROWS * REPEATS} rollouts"
    assert {row[7] for row in tab.rows()} == {"Paris"}
    page.fill("#f-text", "task:7")
    assert [(row[0], row[1]) for row in tab.rows()] == [("7", str(r)) for r in range(REPEATS)]
    page.fill("#f-text", "")
    page.select_option("#f-status", label="agent_run_error")
    assert tab.count() == f"{2 * REPEATS} of {ROWS * REPEATS} rollouts"
    page.select_option("#f-status", label="any outcome")
    page.select_option("#f-reward", "partial")
    assert {row[3] for row in tab.rows()} == {"0.500"}
    page.select_option("#f-reward", "none")
    assert {row[3] for row in tab.rows()} == {"-"} and len(tab.rows()) == 4 * REPEATS
    page.select_option("#f-reward", "any")
    page.click("#rollouts th[data-col=reward]")
    rewards = [row[3] for row in tab.rows()]
    scored = [r for r in rewards if r != "-"]
    assert rewards[0] == "0.000" and scored == sorted(scored) and rewards == scored + ["-"] * (50 - len(scored))
    page.click("#rollouts th[data-col=reward]")
    assert tab.rows()[0][3] == "1.000"


def test_a_click_opens_the_rollout(tab: Page) -> None:
    page = tab.page
    page.fill("#f-text", "task:0")
    page.locator("#rollouts tbody tr").first.click()
    assert page.locator("#drawer").is_visible()
    assert page.locator("#drawer-title").text_content() == "Task 0, rollout 0 · policy · scored"
    assert page.locator("#drawer-prompt").text_content() == "userWhat is the capital of France? (q0)"
    assert page.locator("#drawer-turns .item.call").text_content() == 'tool call lookup{"key": "capital"}'
    assert page.locator("#drawer-answer").text_content() == "Paris"
    assert "judge_noteexact match" in (page.locator("#drawer-verifier").text_content() or "")
    page.keyboard.press("Escape")
    assert not page.locator("#drawer").is_visible()


def test_markup_in_a_rollout_is_shown_as_text(tab: Page) -> None:
    page = tab.page
    page.fill("#f-text", "task:1")
    page.locator("#rollouts tbody tr").first.click()
    assert page.locator("#drawer-answer").text_content() == "</script><script>alert(1)</script><!-- <b>bold</b>"
    assert page.locator("#drawer b").count() == 0 and page.locator("script").count() == 3


def test_a_failed_rollout_shows_its_failure(tab: Page) -> None:
    page = tab.page
    page.fill("#f-text", "task:2")
    page.locator("#rollouts tbody tr").first.click()
    failure = page.locator("#drawer-failure").text_content() or ""
    assert "classagent_run_error" in failure and "agent broke <here>" in failure


def test_the_baseline_section_lists_the_flipped_tasks(tab: Page) -> None:
    page = tab.page
    flips = page.locator("#baseline table.flips tbody tr").evaluate_all(
        "rows => rows.map(r => r.cells[0].textContent + ' ' + r.cells[1].textContent)"
    )
    assert sorted(flips) == ["1 broke", "11 fixed", "5 fixed", "7 broke"]
    page.locator("#baseline .flip", has_text="11").click()
    assert {row[0] for row in tab.rows()} == {"11"}


def test_show_the_wrong_answers_filters_the_table_to_reward_zero(tab: Page) -> None:
    tab.page.click("#show-wrong")
    rows = tab.rows()
    assert len(rows) == 2 * REPEATS and {row[3] for row in rows} == {"0.000"}
    assert {row[7] for row in rows} == {"</script><script>alert(1)</script><!-- <b>bold</b>"}


@pytest.fixture
def opened(browser: Any) -> Iterator[Any]:
    """Tabs on other reports than ``report``: each closed after the test, which none may trouble."""
    tabs: list[Page] = []

    def open_(path: Path) -> Page:
        tabs.append(Page(browser, path))
        return tabs[-1]

    yield open_
    for tab in tabs:
        assert tab.problems == []
        tab.page.close()


def open_task(tab: Page, task: int) -> None:
    tab.page.keyboard.press("Escape")
    tab.page.fill("#f-text", f"task:{task}")
    tab.page.locator("#rollouts tbody tr").first.click()


def test_a_response_of_another_shape_is_shown_as_it_came(opened: Any, shapes: Path) -> None:
    tab = opened(shapes)
    page = tab.page
    for task, shown in ((0, '"content": "chat answer"'), (1, '"just a string"'), (2, '"output": "not a list"')):
        open_task(tab, task)
        assert shown in (page.locator("#drawer-turns .item.raw pre").text_content() or ""), task
        assert shown in tab.rows()[0][7], task  # the table's answer column too
        assert "shown as returned" in (page.locator("#drawer-answer").text_content() or "")
    open_task(tab, 3)
    assert page.locator("#drawer-prompt").text_content() == "input42"
    assert page.locator("#drawer-turns .item.reasoning pre").text_content() == "in short\nthinking it through"
    open_task(tab, 4)
    assert page.locator("#drawer-prompt").text_content() == "no prompt (the row has no responses_create_params)"
    open_task(tab, 5)
    assert page.locator("#drawer-prompt").text_content() == 'input{"weird":"dict"}'


def test_show_the_wrong_answers_leaves_out_masked_rollouts(opened: Any, shapes: Path) -> None:
    tab = opened(shapes)
    tab.page.click("#show-wrong")
    assert {(row[0], row[4], row[7]) for row in tab.rows()} == {("7", "scored", "scored zero")}
    assert tab.count() == f"{SHAPE_REPEATS} of {len(SHAPES) * SHAPE_REPEATS} rollouts"


def test_a_flipped_task_and_the_wrong_answers_clear_the_other_filters(tab: Page) -> None:
    page = tab.page
    page.click("#show-wrong")
    page.locator("#baseline .flip", has_text="11").click()  # task 11 is right in this run
    assert {row[0] for row in tab.rows()} == {"11"} and len(tab.rows()) == REPEATS
    page.select_option("#f-status", label="agent_run_error")
    page.select_option("#f-group", label="policy")
    page.click("#show-wrong")
    assert tab.count() == f"{2 * REPEATS} of {ROWS * REPEATS} rollouts"


def test_sorting_goes_back_to_the_first_page(tab: Page) -> None:
    page = tab.page
    page.click("#t-next")
    page.click("#rollouts th[data-col=reward]")
    assert page.locator("#t-page").text_content() == "page 1 of 2"
    assert tab.rows()[0][3] == "0.000"


def tick_labels(page: Any, chart: str) -> list[str]:
    return page.locator(f"#{chart} text.ytick").all_text_contents()


@pytest.mark.parametrize("which", ["report", "shapes"])
def test_chart_axes_are_labelled_exactly(opened: Any, report: Path, shapes: Path, which: str) -> None:
    tab = opened(report if which == "report" else shapes)
    page = tab.page
    charts = page.locator("svg.chart").evaluate_all("nodes => nodes.map(n => n.id)")
    assert len(charts) == 5
    for chart in charts:
        labels = tick_labels(page, chart)
        values = [float(v) for v in labels]
        steps = {round(b - a, 9) for a, b in pairwise(values)}
        # Evenly spaced, each written exactly (so no two alike), counts as whole numbers.
        assert len(steps) == 1 and len(set(labels)) == len(labels) and values[0] == 0, (chart, labels)
        exact = [f"{v:.{len(label.partition('.')[2])}f}" for v, label in zip(values, labels, strict=True)]
        assert exact == labels, chart
        if chart in ("chart-rewards", "chart-latency", "chart-outcomes"):
            assert all("." not in label for label in labels), (chart, labels)
    completed = ROWS * REPEATS - 2 * REPEATS if which == "report" else len(SHAPES) * SHAPE_REPEATS
    ends = page.locator("#chart-latency-run > text").all_text_contents()
    assert ends[-1] == str(completed)


def test_outcome_colours_go_by_name_and_one_chart_keeps_its_size(opened: Any, report: Path, all_failed: Path) -> None:
    def fills(path: Path) -> tuple[dict[str, set[str]], float]:
        tab = opened(path)
        marks = tab.page.locator("#chart-outcomes rect.mark").evaluate_all(
            "rs => rs.map(r => [r.textContent.split(' · ')[0], r.getAttribute('fill')])"
        )
        width = tab.page.locator("#chart-outcomes").bounding_box()["width"]
        by_name: dict[str, set[str]] = {}
        for name, fill in marks:
            by_name.setdefault(name, set()).add(fill)
        return by_name, width

    mixed, _ = fills(report)
    failed, width = fills(all_failed)
    assert set(failed) == {"agent_run_error"} and failed["agent_run_error"] == mixed["agent_run_error"]
    assert len(mixed["scored"]) == 1 and mixed["scored"] != mixed["agent_run_error"]
    assert width <= 760  # the run's only chart: as wide as one of two, not the whole page
