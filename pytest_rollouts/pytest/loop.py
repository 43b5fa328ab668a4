"""A lean run protocol for sessions made only of rollout items.

pytest's default protocol wraps each phase in output capture, log capture and fixture
setup. A rollout item has no fixtures and prints nothing, yet at 10k items those
wrappers cost more than the HTTP work. Here each item goes through the same hooks
reporters, ``-x``, ``--lf``, junitxml and xdist rely on, with its call report. Setup
and teardown cannot fail and are not reported, which also spares the terminal reporter
from keeping two reports per item that say nothing -- except the teardown report when
junitxml is on, since that is where it records an item's properties.
"""

from __future__ import annotations

import pytest
from pluggy import HookRelay

from pytest_rollouts.pacing import paced


def run_lean(item: pytest.Item, ihook: HookRelay | None = None) -> None:
    """``ihook``: the item's hook relay, when the caller already has its file's."""
    ihook = ihook or item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    phases = [("call", item.runtest)]
    junitxml = item.config.option.xmlpath
    if junitxml:
        phases.append(("teardown", item.teardown))
    for when, func in phases:
        call = pytest.CallInfo.from_call(func, when=when, reraise=(pytest.exit.Exception, KeyboardInterrupt))
        report = ihook.pytest_runtest_makereport(item=item, call=call)
        ihook.pytest_runtest_logreport(report=report)
    if not junitxml:
        # The call report holds its own copy, and without a teardown report nothing reads the
        # item's again: at 100k items they are tens of MB kept to the end of the session.
        item.user_properties.clear()
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def run_items(session: pytest.Session) -> None:
    """pytest's run loop, minus the ``pytest_runtest_protocol`` hook call around each item.

    Its wrappers (warnings capture, assertion-rewriting and faulthandler set-up) guard
    test code, which a rollout item does not run: per item they cost about as much as
    the protocol itself. ``-x`` and ``--maxfail`` still stop the loop, through the session
    flags they set from the reports.
    """
    parent, ihook = None, None
    with paced():
        for item in session.items:
            # Every item of a file has its file's hook relay; working it out costs a conftest lookup.
            if item.parent is not parent:
                parent, ihook = item.parent, item.ihook
            run_lean(item, ihook)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
