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
from pluggy import HookCaller, HookRelay

from pytest_rollouts.datatype import datatype
from pytest_rollouts.pacing import paced

# pytest's own plugins whose report hook does nothing for a rollout item, yet runs for each:
# tmpdir keeps each phase's outcome in the item's stash (for tmp_path's retention, and a rollout
# item has no fixtures: 220 bytes an item, to the end of the session), unittest turns
# ``unittest.SkipTest`` into a skip (a rollout item runs no test code).
IDLE_FOR_ROLLOUTS = ("tmpdir", "unittest")
# What an item's lists, and its kept report's, become once it ran and was logged (outside
# junitxml, which reads them at teardown): one shared empty tuple, not an empty list each.
SPENT: tuple[()] = ()


@datatype(slots=True)
class FileHooks:
    """The hooks a file's items are run with: its relay, and its report hook without the idle plugins."""

    relay: HookRelay
    makereport: HookCaller


FILE_HOOKS_KEY = pytest.StashKey[FileHooks]()


def file_hooks(item: pytest.Item) -> FileHooks:
    """Worked out once per file (on its node's stash): a relay takes a conftest lookup, a subset caller more."""
    parent = item.parent if item.parent is not None else item
    hooks = parent.stash.get(FILE_HOOKS_KEY, None)
    if hooks is None:
        relay = item.ihook
        manager = item.config.pluginmanager
        # The file's own relay leaves out conftests from elsewhere; those stay out, and the idle ones too.
        kept = {impl.plugin for impl in relay.pytest_runtest_makereport.get_hookimpls()}
        idle = [manager.get_plugin(name) for name in IDLE_FOR_ROLLOUTS]
        removed = [
            impl.plugin
            for impl in manager.hook.pytest_runtest_makereport.get_hookimpls()
            if impl.plugin not in kept or impl.plugin in idle
        ]
        hooks = parent.stash[FILE_HOOKS_KEY] = FileHooks(
            relay, manager.subset_hook_caller("pytest_runtest_makereport", removed)
        )
    return hooks


def run_lean(item: pytest.Item) -> None:
    """One item through the lean protocol, with its file's hooks."""
    hooks = file_hooks(item)
    ihook = hooks.relay
    # Both are built on each access (a rollout item's own ``location``, pytest's ``nodeid`` from its
    # node id), and both hooks take them.
    nodeid, location = item.nodeid, item.location
    ihook.pytest_runtest_logstart(nodeid=nodeid, location=location)
    phases = [("call", item.runtest)]
    junitxml = item.config.option.xmlpath
    if junitxml:
        phases.append(("teardown", item.teardown))
    for when, func in phases:
        call = pytest.CallInfo.from_call(func, when=when, reraise=(pytest.exit.Exception, KeyboardInterrupt))
        report = hooks.makereport(item=item, call=call)
        ihook.pytest_runtest_logreport(report=report)
    if not junitxml:
        # The call report holds its own copy, and without a teardown report nothing reads the
        # item's again: at 100k items they are tens of MB kept to the end of the session. Nor
        # is anything added to its lists once it ran: an empty list of its own is 56 bytes an item.
        item.user_properties = SPENT  # type: ignore[assignment]
        if not item._report_sections:
            item._report_sections = SPENT  # type: ignore[assignment]
    ihook.pytest_runtest_logfinish(nodeid=nodeid, location=location)


def run_items(session: pytest.Session) -> None:
    """pytest's run loop, minus the ``pytest_runtest_protocol`` hook call around each item.

    Its wrappers (warnings capture, assertion-rewriting and faulthandler set-up) guard
    test code, which a rollout item does not run: per item they cost about as much as
    the protocol itself. ``-x`` and ``--maxfail`` still stop the loop, through the session
    flags they set from the reports.
    """
    with paced():
        for item in session.items:
            run_lean(item)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
