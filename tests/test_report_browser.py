"""The report in a real browser: Debian's Chromium, driven by Playwright, opens the file.

Never a downloaded browser and never the network: the page is a local file and Chromium is told
not to reach out (its background services would try). Without /usr/bin/chromium or the
``playwright`` package these tests skip, saying which is missing; tests/test_report.py still runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_rollouts.cli import main

from .test_report import ROWS, make_run

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


@pytest.fixture(scope="module")
def browser(report: Path) -> Iterator[Any]:
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
