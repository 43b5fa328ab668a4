"""pytest hooks for pytest-rollouts: options, collection, dispatch lifecycle, reporting.

Imported by every pytest session through the ``pytest11`` entry point, so this module
imports nothing heavy; the machinery is imported only once a dataset is collected or a
rollouts option is given.
"""

from __future__ import annotations

import gc
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rollouts.config import DECLARATION
from pytest_rollouts.options import OPTIONS
from pytest_rollouts.pytest.role import decide_role, refused_by_workers, role
from pytest_rollouts.pytest.stash import ENDING_KEY, RUN_ID_KEY, RUN_KEY

if TYPE_CHECKING:
    from pytest_rollouts.pytest.session import RolloutRun


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_rollouts import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rollouts", "agent rollouts (pytest-rollouts)")
    for option in OPTIONS:
        # argparse formats help with %: a literal one ("P%") is doubled.
        text = option.described.replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": "rollouts_" + option.name, "default": None, "help": text}
        if option.flag:
            kwargs["action"] = "store_true"
        else:
            kwargs["metavar"] = option.metavar
            if option.repeatable:
                kwargs["action"] = "append"
        group.addoption(option.cli, **kwargs)
        parser.addini(option.ini, option.described, type=option.ini_type, default=None)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(parser: pytest.Parser, args: list[str]) -> Generator[None, None, None]:
    """A mistyped ``--rollouts-*`` option names the one meant (exit 4), where pytest would only say
    ``unrecognized arguments``. After the initial conftests, which may add options of their own."""
    yield
    if any(arg.startswith(PREFIX) for arg in args):  # spares every other session the parse
        _refuse_unknown(parser, args)


# What a rollouts option starts with, mistyped or not (``--rollout-parallel``, ``--rollouts_limit``).
PREFIX = "--rollout"


def _refuse_unknown(parser: pytest.Parser, args: list[str]) -> None:
    """The nearest option to each unknown one; one with none near is left to pytest's own error."""
    _, unrecognized = parser.parse_known_and_unknown_args(args)
    for arg in unrecognized:
        given = arg.split("=", 1)[0]
        if given.startswith(PREFIX):
            # Without the prefix every option shares, which would make any ``--rollouts-x`` near some option.
            name = given.replace("_", "-").removeprefix(PREFIX).removeprefix("s").lstrip("-")
            meant = _nearest(name, [option.cli.removeprefix("--rollouts-") for option in OPTIONS])
            if meant:
                raise pytest.UsageError(f"unknown option {given}: did you mean --rollouts-{meant}?")


def _refuse_unknown_ini(config: pytest.Config) -> None:
    """A mistyped ``rollouts_*`` ini key is a usage error naming the key meant: pytest only warns of
    an unknown key, in a summary at the end, after the run went ahead without the setting."""
    ours = [option.ini for option in OPTIONS]
    # pytest lists no keys publicly: ``inicfg`` is deprecated for ``getini``, which reads known keys only.
    given = getattr(config, "_inicfg", None)
    for key in config.inicfg if given is None else given:
        if key.startswith("rollout") and key not in ours:
            name = key.replace("-", "_").removeprefix("rollout").removeprefix("s").lstrip("_")
            meant = _nearest(name, [ini.removeprefix("rollouts_") for ini in ours])
            meant = meant and f"rollouts_{meant}"
            where = config.inipath or "-o"
            raise pytest.UsageError(
                f"{where}: unknown option {key}"
                + (f": did you mean {meant}?" if meant else f" (known: {', '.join(ours)})")
            )


def _nearest(given: str, known: list[str]) -> str | None:
    import difflib

    return next(iter(difflib.get_close_matches(given, known, n=1)), None)


def pytest_configure(config: pytest.Config) -> None:
    """Register the reporter; validate settings up front (exit 4) when the user configured any."""
    from pytest_rollouts.pytest.terminal import RolloutReporter

    config.pluginmanager.register(RolloutReporter(config), "rollouts-reporter")
    _refuse_unknown_ini(config)
    decide_role(config)
    if _configured(config):
        from pytest_rollouts.pacing import lasting

        with lasting():  # the run's modules and settings, which live as long as the session
            from pytest_rollouts.pytest.session import RolloutRun

            run = RolloutRun.get(config)
            # An xdist controller never dispatches, so it starts no dispatcher process.
            run.configure(warm=role(config).dispatches and _asked_on_command_line(config))
        _refuse_dist(config)
        _hold_on_controller(config, run)


def _refuse_dist(config: pytest.Config) -> None:
    dist = config.getoption("dist", "no")
    if dist != "no" and config.pluginmanager.has_plugin("xdist"):
        from pytest_rollouts.pytest.xdist import refusal

        reason = refusal(dist)
        if reason:
            raise pytest.UsageError(reason)


def _hold_on_controller(config: pytest.Config, run: RolloutRun) -> None:
    """An xdist controller takes the output before any worker starts, and keeps it until the end
    (its workers join it): one that collected nothing cannot know yet whether its workers will
    prepare the files. A session that only collects writes nothing."""
    only_looks = config.option.collectonly or config.option.help
    if not role(config).controller or only_looks:
        return
    import uuid

    from pytest_rollouts.pytest.lock import hold
    from pytest_rollouts.store.runlock import OutputBusy

    try:
        hold(config, run.paths, config.stash.setdefault(RUN_ID_KEY, uuid.uuid4().hex), shared=True)
    except OutputBusy as exc:
        raise pytest.UsageError(str(exc)) from None


def _asked_on_command_line(config: pytest.Config) -> bool:
    """A rollouts option or a ``.jsonl`` on the command line; rollouts options only in an ini file
    may belong to a repository whose everyday test runs collect no dataset."""
    if any(str(arg).split("::")[0].endswith(".jsonl") for arg in config.args):
        return True
    return any(config.getoption("rollouts_" + option.name) not in (None, []) for option in OPTIONS)


def _configured(config: pytest.Config) -> bool:
    if any(config.getoption("rollouts_" + o.name) not in (None, []) for o in OPTIONS):
        return True
    return any(config.getini(o.ini) not in (None, "", []) for o in OPTIONS)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.name == DECLARATION:
        from pytest_rollouts.pytest.items import SuiteDeclarationFile

        return SuiteDeclarationFile.from_parent(parent, path=file_path)
    if file_path.suffix != ".jsonl":
        return None
    from pytest_rollouts.pytest.items import collect_dataset

    def run() -> RolloutRun:  # the run its rows belong to, made the first time one is met
        from pytest_rollouts.pytest.session import RolloutRun

        return RolloutRun.get(parent.config)

    dataset = collect_dataset(file_path, parent, run)
    if dataset is not None:
        run()
    return dataset


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A scheduler that keeps workers' windows full and survives a dead one, for runs configured for rollouts."""
    if not _configured(config) or config.getoption("dist") != "load":
        return None
    from pytest_rollouts.pytest.session import RolloutRun
    from pytest_rollouts.pytest.xdist import CrashedWorkers, RolloutScheduling

    settings = RolloutRun.get(config).settings
    config.pluginmanager.register(CrashedWorkers(config), "rollouts-crashed-workers")
    return RolloutScheduling(config, log, settings.parallel, settings.fewest_repeats)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if RUN_KEY in config.stash:
        config.stash[RUN_KEY].number_tasks(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    run = session.config.stash.get(RUN_KEY, None)
    if run is not None and _will_run(session):
        run.prepare(session.items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> bool | None:
    """Sessions of rollout items only take the lean protocol; mixed sessions keep pytest's own."""
    run = item.config.stash.get(RUN_KEY, None)
    if run is None or not run.lean:
        return None
    from pytest_rollouts.pytest.loop import run_lean

    run_lean(item)
    return True


@pytest.hookimpl(tryfirst=True, specname="pytest_runtestloop")
def pytest_runtestloop_lean(session: pytest.Session) -> bool | None:
    """A session of rollout items only, in one process, runs them without the per-item protocol hook.

    xdist workers keep their own loop, unless they must run nothing (``Workers.hold_back``), and
    anything pytest's loop would refuse to run (collection errors, ``--co``) is left to it.
    """
    run = session.config.stash.get(RUN_KEY, None)
    if run is not None and role(session.config).worker:
        return True if run.workers.hold_back(session, run.numbering.refusal) else None
    if run is None or not run.lean or not _will_run(session):
        return None
    from pytest_rollouts.pytest.loop import run_items

    run_items(session)
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    run = session.config.stash.get(RUN_KEY, None)
    if run is None:
        return (yield)
    try:
        # Inside: Ctrl-C, or any error, while the plan goes out or agents are checked still
        # stops the dispatcher (an engine fed half a plan would wait for the rest for ever).
        run.start(session)
        return (yield)
    finally:
        run.finish()
        run.stops.hold()  # the session ends now: see pytest/stopping.py
        # Everything alive now lives until the session ends; sparing it from the
        # collector's full passes saves seconds at 100k items.
        gc.freeze()


@pytest.hookimpl(wrapper=True, specname="pytest_runtestloop")
def pytest_runtestloop_refused(session: pytest.Session) -> Generator[None, object, object]:
    """An xdist controller whose workers refused the run before any request ends as one process
    does, the reason said once: a usage error (exit 4), or ``Refused`` with its exit status (2 for
    unhealthy agents). xdist knows such workers only as stopped (its ``Interrupted`` is a
    ``KeyboardInterrupt``), each having skipped the item it stopped at."""
    try:
        return (yield)
    except KeyboardInterrupt:
        from pytest_rollouts.pytest.stash import Refused

        refusal = refused_by_workers(session.config)
        if refusal is None:
            raise
        why, code = refusal
        if code == pytest.ExitCode.USAGE_ERROR:
            raise pytest.UsageError(why) from None
        raise Refused(why, returncode=code) from None


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    """The run's end: scored, judged and published (``pytest/finish.py``), its verdict the session's
    exit status, and the ``Ending`` stashed for the reporter, which only renders it.

    Around the other plugins' session ends (inside the terminal reporter's, which prints the section
    after): xdist's controller waits there for its workers to exit, and a stop landing then (Ctrl-C,
    SIGTERM) must still end in the section, not a traceback."""
    try:
        yield
    except KeyboardInterrupt:
        session.exitstatus = pytest.ExitCode.INTERRUPTED
    config = session.config
    reporter = config.pluginmanager.get_plugin("rollouts-reporter")
    if RUN_KEY not in config.stash and not reporter.met and refused_by_workers(config) is None:
        return  # no run, no rollout reported: pytest's session, its exit status pytest's own
    from pytest_rollouts.pytest.finish import end_run

    ending = config.stash[ENDING_KEY] = end_run(config, session, reporter.tally, reporter.say)
    # The run's verdict (scoring/verdict.py) is the session's exit status.
    session.exitstatus = ending.verdict.exit_code


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's processes end here, the dispatcher waited for: the session's end only let it go,
    so it exits while the summary is written. A dispatcher that does not exit even when killed is
    said last, as nothing else reports it. A session refused at configure (bad settings: exit 4)
    stops the one started early, or a caller of ``pytest.main`` (a notebook, a trainer running evals
    in its own process) would keep one per refused session."""
    run = config.stash.get(RUN_KEY, None)
    if run is not None and (unended := run.close()):
        from pytest_rollouts.pytest.progress import tell

        tell(config, unended)


def _will_run(session: pytest.Session) -> bool:
    """Mirror pytest's own reasons not to run tests, so nothing is sent when nothing will run."""
    option = session.config.option
    if option.collectonly:
        return False
    return not (session.testsfailed and not option.continue_on_collection_errors)
