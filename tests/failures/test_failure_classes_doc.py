"""docs/failure-classes.md is the one list of failure classes: it must name exactly the ones the
code knows, and say of each what resume's rules (``rows/resume.py``) do with it."""

from __future__ import annotations

from pathlib import Path

from pytest_rollouts.rows.resume import RETRYABLE_WITH_OPT_IN, is_terminal
from pytest_rollouts.rows.schema import ALWAYS_TERMINAL
from pytest_rollouts.scoring.summary import KNOWN_FAILURE_CLASSES

DOC = Path(__file__).parents[2] / "docs" / "failure-classes.md"
COLUMNS = ["class", "emitted by", "when", "terminal", "retried in the run", "resume sends it again"]


def _table() -> dict[str, dict[str, str]]:
    """The table's rows by class, for the rows that name one (in backticks)."""
    lines = [line for line in DOC.read_text().splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == COLUMNS
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == len(COLUMNS), line
        if cells[0].startswith("`"):
            rows[cells[0].strip("`")] = dict(zip(COLUMNS, cells, strict=True))
    return rows


def test_the_table_lists_exactly_the_classes_the_code_knows() -> None:
    assert set(_table()) == KNOWN_FAILURE_CLASSES


def test_what_the_table_says_of_terminal_classes_is_what_resume_does() -> None:
    for name, row in _table().items():
        always = row["terminal"].startswith("always")
        assert always == (name in ALWAYS_TERMINAL), name
        assert always == is_terminal(name, stamped_terminal=False, retry_terminal_timeouts=True), name
        assert row["resume sends it again"].startswith("never") == always, name
        reopened = "--rollouts-retry-terminal-timeouts" in row["resume sends it again"]
        assert reopened == (name == RETRYABLE_WITH_OPT_IN), name
        assert reopened == (not is_terminal(name, stamped_terminal=True, retry_terminal_timeouts=True)), name
