"""Every option has an ini twin; bad values are usage errors (exit 4) that say what is wrong."""

from __future__ import annotations

import os

import pytest

from pytest_rollouts.config.values import check_url
from pytest_rollouts.options import OPTIONS

from ..agents import ScriptedAgent
from ..helpers import QUIET, Artifacts, dispatchers_of, keys, run_rollouts, tasks, write_rows


@pytest.mark.parametrize(
    ("arg", "words"),
    [
        ("--rollouts-repeats=0", "--rollouts-repeats: must be from 1 to 1000000 (got '0')"),
        ("--rollouts-repeats=-1", "--rollouts-repeats: must be from 1 to 1000000 (got '-1')"),
        ("--rollouts-repeats=many", "--rollouts-repeats: must be N or AGENT=N"),
        ("--rollouts-parallel=many", "--rollouts-parallel: must be a whole number (got 'many')"),
        (
            "--rollouts-responses-create-params=[1]",
            "--rollouts-responses-create-params: must be a JSON object",
        ),
        ("--rollouts-agent=ftp://x", "--rollouts-agent: agent address 'ftp://x' is not an http(s) URL"),
        # An empty value named the directory itself, which a fresh run then moved aside.
        ("--rollouts-out=", "--rollouts-out: must name the output file, <stem>.jsonl (got '')"),
        # The value was shown twice: once by the message, once by the error report.
        ("--rollouts-out=foo.txt", "--rollouts-out: must name the output file, <stem>.jsonl (got 'foo.txt')"),
        # A stem-less name wrote hidden files (.jsonl, .jsonl_failures.jsonl, ...).
        ("--rollouts-out=o/.jsonl", "--rollouts-out: must name the output file, <stem>.jsonl (got 'o/.jsonl')"),
        # nan compares false with every mean: the gate was silently off.
        ("--rollouts-fail-under=nan", "--rollouts-fail-under: must be a finite number"),
        # Failed only at run time, on port 80 or with no host at all.
        ("--rollouts-agent=http://127.0.0.1:", "agent address 'http://127.0.0.1:' has an empty port"),
        ("--rollouts-agent=https://", "agent address 'https://' is not an http(s) URL with a host"),
        # Killed the dispatcher: a host IDNA cannot encode.
        ("--rollouts-agent=http://ex\u00e4mple..com:9", "has a host that is no domain name (IDNA)"),
        ("--rollouts-agent=http://example..com:9", "has a host that is no domain name (IDNA)"),
        # Every endpoint was appended to the fragment: /run, /health and /aggregate_metrics were one route.
        ("--rollouts-agent=http://127.0.0.1:9/p#frag", "has a #fragment, which no request carries"),
        # Went into every request line ('POST /v1 /chat/completions'): a 404 on every rollout.
        (
            "--rollouts-model=http://127.0.0.1:9/v1 ",
            "--rollouts-model: agent address 'http://127.0.0.1:9/v1 ' has a space",
        ),
        # Passed validation, then overflowed the plan's columns: INTERNALERROR, and the session hung.
        ("--rollouts-parallel=9223372036854775807", "--rollouts-parallel: must be at most 100000"),
        ("--rollouts-max-resident=99999999999", "--rollouts-max-resident: must be at most"),
        ("--rollouts-repeats=99999999999", "--rollouts-repeats: must be from 1 to 1000000"),
        ("--rollouts-repeats=a=99999999999", "repeats for 'a' must be a whole number from 1 to 1000000"),
        ("--rollouts-limit=99999999999999999999", "--rollouts-limit: must be at most"),
        ("--rollouts-max-attempts=99999999999", "--rollouts-max-attempts: must be at most 1000"),
        ("--rollouts-shard=0/99999999999", "--rollouts-shard: N must be at most 1000000"),
        # Accepted, then crashed scoring (a timer that never fires).
        ("--rollouts-timeout=inf", "--rollouts-timeout: must be a finite number"),
        ("--rollouts-timeout=nan", "--rollouts-timeout: must be a finite number"),
        ("--rollouts-timeout=1e12", "--rollouts-timeout: must be at most"),
        # Accepted: every rollout then failed as a TimeoutError and the run exited 0.
        ("--rollouts-timeout=1e-300", "--rollouts-timeout: must be at least 0.001"),
        ("--rollouts-dispatch-budget=1e-9", "--rollouts-dispatch-budget: must be at least 0.001"),
        ("--rollouts-dispatch-budget=inf", "--rollouts-dispatch-budget: must be a finite number"),
        ("--rollouts-drain-margin=nan", "--rollouts-drain-margin: must be a finite number"),
        ("--rollouts-retry-backoff=nan", "--rollouts-retry-backoff: must be a finite number"),
        # A heartbeat of 0 would spin the dispatcher; one past pytest's 120 s of patience would stop it as stuck.
        ("--rollouts-progress-interval=0", "--rollouts-progress-interval: must be at least 0.05"),
        ("--rollouts-progress-interval=300", "--rollouts-progress-interval: must be at most 60"),
    ],
)
def test_bad_option_is_a_usage_error(pytester: pytest.Pytester, arg: str, words: str) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", arg)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{words}*"])


def test_a_session_refused_at_configure_leaves_no_dispatcher_process(pytester: pytest.Pytester) -> None:
    """The dispatcher process starts early (its imports overlap collection) and was stopped only at
    the session's end, which a refused session never reaches: a caller of ``pytest.main`` kept one
    per refused session, waiting on its input."""
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", "--rollouts-agent=http://127.0.0.1:9", "--rollouts-timeout=inf")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert dispatchers_of(os.getpid()) == []


def test_an_output_path_that_is_a_directory_is_refused_and_left_alone(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    (pytester.path / "keep.jsonl").mkdir()
    (pytester.path / "keep.jsonl" / "mine.txt").write_text("precious")
    result = run_rollouts(pytester, "data.jsonl", "--rollouts-out=keep.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--rollouts-out: *keep.jsonl is a directory; name the output file in it*"])
    assert (pytester.path / "keep.jsonl" / "mine.txt").read_text() == "precious"
    assert not list(pytester.path.glob("keep.prev-*"))


def test_bad_ini_value_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nrollouts_timeout = -1\n")
    result = pytester.runpytest(*QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini rollouts_timeout: must be at least 0.001*"])


def test_ini_twins_configure_the_run(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    pytester.makeini(
        f"[pytest]\nrollouts_repeats = 2\nrollouts_agent =\n    {agent.url}\nrollouts_out = ini_out/r.jsonl\n"
    )
    result = pytester.runpytest(*QUIET, "data.jsonl")
    result.assert_outcomes(passed=2)
    assert sorted(keys(Artifacts(pytester.path, "ini_out/r.jsonl").rows)) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_command_line_beats_ini(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    pytester.makeini("[pytest]\nrollouts_repeats = 5\n")
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=1")
    result.assert_outcomes(passed=1)
    assert len(agent.requests) == 1


def test_every_option_is_registered_with_an_ini_twin(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*QUIET, "--help")
    for option in OPTIONS:
        result.stdout.fnmatch_lines([f"*{option.cli}*"])
        result.stdout.fnmatch_lines([f"*{option.ini} *"])


@pytest.mark.parametrize("name", ["agent_map", "fan_out"])
def test_routing_option_help_names_every_kind_of_key(name: str) -> None:
    """A row is keyed by its taskset, agent or task_source, and a map or fan-out takes any of them."""
    [option] = [o for o in OPTIONS if o.name == name]
    assert all(kind in option.help for kind in ("agent", "task_source", "taskset"))


@pytest.mark.parametrize("ini", [False, True])
def test_a_gate_on_metrics_that_are_skipped_is_a_usage_error(
    pytester: pytest.Pytester, agent: ScriptedAgent, ini: bool
) -> None:
    """Without metrics there is no mean reward: the gate could only fail (exit 7), after the whole run."""
    write_rows(pytester.path / "data.jsonl", tasks(1))
    skip = ["--rollouts-no-aggregate"]
    if ini:
        pytester.makeini("[pytest]\nrollouts_no_aggregate = true\n")
        skip = []
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-fail-under=0.5", *skip)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    where = "ini rollouts_no_aggregate" if ini else "--rollouts-no-aggregate"
    result.stderr.fnmatch_lines(
        [
            f"*--rollouts-fail-under needs the metrics that {where} skips: gate the merge instead "
            f"(pytest-rollouts aggregate ... --fail-under X) or drop {where}*"
        ]
    )
    assert agent.requests == []


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        # Was accepted, and failed only at run time after every retry.
        (
            'datasets = ["data.jsonl"]\n[agents.judge]\nurl = "ftp://h"\n',
            "rollouts.toml: agents.judge.url: agent address 'ftp://h' is not an http(s) URL",
        ),
        # Was pydantic's "Input should be a valid tuple".
        (
            'datasets = "data.jsonl"\n',
            "rollouts.toml: datasets: must be a list of glob patterns, e.g. datasets = ['data.jsonl']",
        ),
        # Collected nothing, exit 5, naming no file.
        ("datasets = []\n", "rollouts.toml: datasets: lists no pattern"),
    ],
)
def test_bad_suite_declaration_names_file_and_key(pytester: pytest.Pytester, declaration: str, message: str) -> None:
    write_rows(pytester.path / "s" / "data.jsonl", tasks(1))
    (pytester.path / "s" / "rollouts.toml").write_text(declaration)
    result = run_rollouts(pytester, "s")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert message in result.stdout.str()


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pytest.ini", "[pytest]\nrollouts_no_health_check = maybe\n"),
        ("pyproject.toml", '[tool.pytest.ini_options]\nrollouts_no_health_check = "maybe"\n'),
    ],
)
def test_bad_ini_flag_names_the_ini_key(pytester: pytest.Pytester, name: str, text: str) -> None:
    """pytest's own reading of an ini bool said only "invalid truth value 'maybe'"."""
    (pytester.path / name).write_text(text)
    result = pytester.runpytest(*QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini rollouts_no_health_check: must be true or false*(got 'maybe')"])


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pytest.ini", "[pytest]\nrollouts_no_health_check = yes\n"),
        ("pyproject.toml", "[tool.pytest]\nrollouts_no_health_check = true\n"),
    ],
)
def test_ini_flags_read_as_pytest_reads_them(
    pytester: pytest.Pytester, agent: ScriptedAgent, name: str, text: str
) -> None:
    """An ini string pytest reads as a bool, and a native TOML bool, still set the flag."""
    (pytester.path / name).write_text(text)
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    result.assert_outcomes(passed=1)
    assert agent.health_checks == 0


def test_an_agent_scheme_is_case_insensitive() -> None:
    """HTTP://... was refused as not an http(s) URL."""
    assert check_url("HTTP://127.0.0.1:8000/") == "HTTP://127.0.0.1:8000"


def test_a_refused_agent_address_is_shown_without_its_password(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", "--rollouts-agent=http://evals:hunter2-pass@127.0.0.1:9#frag")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*agent address 'http://127.0.0.1:9#frag' has a #fragment*"])
    assert "hunter2" not in result.stdout.str() + result.stderr.str()


def test_a_mistyped_option_names_the_one_meant(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """pytest said only 'unrecognized arguments'."""
    write_rows(pytester.path / "data.jsonl", tasks(1))
    for typo, meant in (
        ("--rollouts-agnt", "--rollouts-agent"),
        ("--rollouts-repeat", "--rollouts-repeats"),
        ("--rollout-agent", "--rollouts-agent"),
        ("--rollouts_agent", "--rollouts-agent"),
    ):
        result = pytester.runpytest(*QUIET, "data.jsonl", f"{typo}={agent.url}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"ERROR: unknown option {typo}: did you mean {meant}?"])
    assert agent.requests == []


@pytest.mark.parametrize("where", ["ini", "override"])
def test_a_mistyped_ini_key_names_the_one_meant(pytester: pytest.Pytester, agent: ScriptedAgent, where: str) -> None:
    """pytest only warned 'Unknown config option' in the summary, after a run without the setting."""
    write_rows(pytester.path / "data.jsonl", tasks(1))
    args = [*QUIET, "data.jsonl", f"--rollouts-agent={agent.url}"]
    if where == "ini":
        pytester.makeini("[pytest]\nrollouts_paralel = 3\n")
    else:
        args += ["-o", "rollouts_paralel=3"]
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *: unknown option rollouts_paralel: did you mean rollouts_parallel?"])
    assert agent.requests == []


def test_a_bad_suite_declaration_is_one_error_in_plain_words(pytester: pytest.Pytester) -> None:
    """It was shown once for the declaration and once for each dataset, in pydantic's words
    ('agnet: Extra inputs are not permitted')."""
    for name in ("a", "b"):
        write_rows(pytester.path / "s" / f"{name}.jsonl", tasks(1))
    (pytester.path / "s" / "rollouts.toml").write_text(
        'datasets = ["*.jsonl"]\nagnet = "j"\n[agents.j]\nurll = "http://127.0.0.1:1"\n'
    )
    result = pytester.runpytest(*QUIET, "s")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*rollouts.toml: agents.j.urll: unknown key, did you mean 'url'?; agnet: unknown key, did you mean 'agent'?"]
    )
    assert result.stdout.str().count("unknown key, did you mean 'url'?") == 1
    assert "Extra inputs" not in result.stdout.str()
