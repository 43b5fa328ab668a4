"""What a rollout item holds once it ran: 100k of them live to the session's end, so what one item
keeps of its own (not shared with its file's other items) is paid 100k times."""

from __future__ import annotations

from array import array

import pytest

from pytest_rollouts.pytest.tally import Tally

from ..agents import ScriptedAgent
from ..helpers import QUIET, write_rows


class Items:
    """Keeps the session's items and the passed reports pytest's terminal reporter holds, after
    every other plugin's end of session."""

    def __init__(self) -> None:
        self.items: list[pytest.Item] = []
        self.passed: list[pytest.TestReport] = []
        self.tally: Tally | None = None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.items = list(session.items)
        self.passed = list(session.config.pluginmanager.get_plugin("terminalreporter").stats["passed"])
        self.tally = session.config.pluginmanager.get_plugin("rollouts-reporter").tally


def run(
    pytester: pytest.Pytester, agent: ScriptedAgent, rows: list[dict[str, object]], *args: str
) -> list[pytest.Item]:
    return run_kept(pytester, agent, rows, *args).items


def run_kept(pytester: pytest.Pytester, agent: ScriptedAgent, rows: list[dict[str, object]], *args: str) -> Items:
    write_rows(pytester.path / "data.jsonl", rows)
    kept = Items()
    result = pytester.runpytest(
        *QUIET, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-out=out/r.jsonl", *args, plugins=[kept]
    )
    result.assert_outcomes(passed=len(rows))
    return kept


def test_items_share_their_files_id_parts_and_keep_nothing_in_their_stash(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    items = run(pytester, agent, [{"responses_create_params": {"input": f"q{n}"}} for n in range(3)])
    assert [item.nodeid for item in items] == [f"data.jsonl::task[{n}]" for n in range(3)]
    first, second = items[0].id, items[1].id
    assert first.path is second.path and first.names is second.names, "each item parsed its own id"
    # pytest's tmpdir plugin kept each phase's outcome in every item's stash (for tmp_path retention).
    assert [len(item.stash) for item in items] == [0, 0, 0]


def test_items_with_the_same_agent_share_one_set_of_k_names(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    items = run(pytester, agent, [{"responses_create_params": {"input": f"q{n}"}} for n in range(3)])
    assert len({id(item.extra_keyword_matches) for item in items}) == 1
    assert items[0].extra_keyword_matches == {"default"}, "-k default selects them"


def test_ran_items_and_their_kept_reports_hold_no_empty_lists_of_their_own(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """An empty list is 56 bytes: two an item and two a kept report, 22 MB at 100k rows."""
    kept = run_kept(pytester, agent, [{"responses_create_params": {"input": f"q{n}"}} for n in range(3)])
    assert len(kept.passed) == 3
    held = [item.user_properties for item in kept.items] + [item._report_sections for item in kept.items]
    held += [report.user_properties for report in kept.passed] + [report.sections for report in kept.passed]
    assert len({id(empty) for empty in held}) == 1, "each item or report keeps empty lists of its own"
    assert all(len(empty) == 0 for empty in held)


def test_junitxml_still_gets_each_items_properties_at_teardown(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    kept = run_kept(pytester, agent, [{"responses_create_params": {"input": "q"}}], "--junitxml=out/j.xml")
    assert [name for name, _ in kept.items[0].user_properties][:2] == ["rollouts_rewards", "rollouts_elapsed"]
    assert "rollouts_rewards" in (pytester.path / "out/j.xml").read_text()


def test_the_sessions_latencies_are_kept_as_raw_doubles(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """One float object and its pointer a rollout, 3.2 MB at 100k rollouts, to the session's end."""
    kept = run_kept(pytester, agent, [{"responses_create_params": {"input": f"q{n}"}} for n in range(3)])
    assert kept.tally is not None
    durations = kept.tally.durations
    assert isinstance(durations, array) and durations.typecode == "d", type(durations)
    assert len(durations) == 3


def test_an_item_keeps_nothing_in_a_dict_of_its_own(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """pytest's per-node attributes kept in a ``__dict__`` are slots of a rollout item: 120 bytes an item."""
    items = run(pytester, agent, [{"responses_create_params": {"input": f"q{n}"}} for n in range(3)])
    assert [vars(item) for item in items] == [{}, {}, {}]
    assert "task[0]" in items[0].keywords and items[0].extra_keyword_matches == {"default"}
