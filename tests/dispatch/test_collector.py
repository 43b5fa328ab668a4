"""The collector's pace is changed only for the work that asks, and always put back."""

from __future__ import annotations

import gc

import pytest

from pytest_rollouts.pacing import YOUNG_THRESHOLD, lasting, paced


def test_paced_slows_the_young_passes_and_restores_them_even_on_error() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), paced():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        raise RuntimeError
    assert gc.get_threshold() == before


@pytest.mark.parametrize("enabled", [True, False])
def test_lasting_pauses_then_freezes_and_leaves_the_collector_as_it_was(enabled: bool) -> None:
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with lasting():
            assert not gc.isenabled()
            kept = [[] for _ in range(100)]
            frozen_before = gc.get_freeze_count()
        assert gc.isenabled() is enabled
        assert gc.get_freeze_count() >= frozen_before + len(kept), "what was made inside is frozen"
    finally:
        (gc.enable if was else gc.disable)()


def test_a_configured_session_freezes_the_runs_modules_and_settings_as_it_configures(
    pytester: pytest.Pytester,
) -> None:
    """They live as long as the session: passes of the collector over them while they are made
    freed nothing, and later ones would walk them again (about 5 ms of a one-row run's start)."""
    pytester.makeconftest(
        "import gc, pytest\n"
        "@pytest.hookimpl(trylast=True)\n"
        "def pytest_configure(config):\n"
        "    print('FROZEN', gc.get_freeze_count() > 0, gc.isenabled())\n"
    )
    result = pytester.runpytest_subprocess("-s", "--co", "-q", "-p", "no:cacheprovider", "--rollouts-parallel=2")
    result.stdout.fnmatch_lines(["FROZEN True True"])
