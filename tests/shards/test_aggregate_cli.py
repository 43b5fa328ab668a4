"""``pytest-rollouts aggregate`` refuses bad options up front, like the run does, with nothing written."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from pytest_rollouts.cli import HEADERS_ENV, build_parser

from ..agents import ScriptedAgent
from ..helpers import aggregate, run_rollouts, tasks, write_rows

EXIT_USAGE = 4


@pytest.fixture
def gym_shards(tmp_path: Path) -> Path:
    """A working directory with two NeMo Gym shards (rs0, rs1: two tasks each) that merge cleanly,
    next to an earlier merged run, results/all.jsonl, whose files must survive a refused merge."""
    work = tmp_path / "work"
    for k in range(2):
        rows = [{"_ng_task_index": t, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}} for t in (2 * k, 2 * k + 1)]
        write_rows(work / f"rs{k}_materialized_inputs.jsonl", rows)
        write_rows(work / f"rs{k}.jsonl", [{**row, "reward": 1.0} for row in rows])
    for name in ("all.jsonl", "all_failures.jsonl", "all_materialized_inputs.jsonl"):
        write_rows(work / "results" / name, [{"earlier": name}])
    return work


def files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def refused(work: Path, *args: str) -> str:
    """Run the merge in ``work``; it must be a usage error that wrote nothing, even next to ``work``.
    Its stderr is returned."""
    before = files(work.parent)
    result = aggregate(work, *args)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "Traceback" not in result.stderr
    assert files(work.parent) == before, "nothing is written"
    return result.stderr


@pytest.mark.parametrize("out", ["results/", "", "results/all.txt"])
def test_an_out_not_named_stem_jsonl_is_a_usage_error(gym_shards: Path, out: str) -> None:
    """It used to crash (IsADirectoryError) leaving temp files, even above the working directory,
    or write sidecars named after the stem, over all.jsonl's."""
    stderr = refused(gym_shards, "--input", "rs*.jsonl", "--out", out)
    assert "--out: must name the output file, <stem>.jsonl" in stderr and repr(out) in stderr


def test_an_out_that_is_a_directory_is_a_usage_error(gym_shards: Path) -> None:
    (gym_shards / "merged.jsonl").mkdir()
    stderr = refused(gym_shards, "--input", "rs*.jsonl", "--out", "merged.jsonl")
    assert f"--out: {gym_shards / 'merged.jsonl'} is a directory; name the output file in it" in stderr


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ("bogus", "--agent: agent address 'bogus' is not an http(s) URL"),
        ("a=notaurl", "--agent: agent address 'notaurl' is not an http(s) URL"),
    ],
    ids=["no-name", "not-a-url"],
)
def test_a_bad_agent_is_a_usage_error_before_anything_is_written(gym_shards: Path, agent: str, message: str) -> None:
    """A name without '=' crashed with a ValueError once the merged files were written; a value
    that is no http(s) URL was taken as one. Both are refused the way --rollouts-agent refuses them."""
    stderr = refused(gym_shards, "--input", "rs*.jsonl", "--out", "m/all.jsonl", "--agent", agent)
    assert message in stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--out", "m/all.jsonl"), "the following arguments are required: --input"),
        (("--input", "rs*.jsonl", "--out", "m/all.jsonl", "--fail-under", "half"), "must be a number (got 'half')"),
        (("--input", "rs*.jsonl", "--out", "m/all.jsonl", "--bogus"), "unrecognized arguments: --bogus"),
    ],
    ids=["missing", "bad-value", "unknown"],
)
def test_a_bad_command_line_exits_as_every_usage_error(gym_shards: Path, args: tuple[str, ...], words: str) -> None:
    """argparse's own 2 meant nothing in the merge's codes; 4 is its usage error."""
    assert words in refused(gym_shards, *args)


def test_a_header_given_twice_is_refused_as_a_run_refuses_it(gym_shards: Path) -> None:
    """The last value won silently; a run refuses two values within one source."""
    args = ("--input", "rs*.jsonl", "--out", "m/all.jsonl", "--agent-header=X-Key=one", "--agent-header=x-key=two")
    stderr = refused(gym_shards, *args)
    assert "--agent-header: header x-key is given twice with different values (not shown)" in stderr
    assert "one" not in stderr.split("given twice")[1] and "two" not in stderr


def test_command_line_headers_replace_the_environments_one_by_one(
    gym_shards: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HEADERS_ENV, "X-Key=from-env-0123\nX-Team=evals")
    with ScriptedAgent(aggregate=lambda body: {"agent_metrics": {}}) as server:
        result = aggregate(
            gym_shards, "--input", "rs*.jsonl", "--out", "m/all.jsonl", "--agent", server.url, "--agent-header=x-key=c1"
        )
        assert result.returncode == 0, result.stderr
        [headers] = server.headers
    assert (headers["x-key"], headers["X-Team"]) == ("c1", "evals")
    assert "from-env-0123" not in headers.values(), "the replaced value is not sent too"


@pytest.mark.parametrize("named", [True, False], ids=["named", "url-alone"])
def test_an_agent_url_named_or_alone_serves_the_groups_metrics(gym_shards: Path, named: bool) -> None:
    """As in a run: NAME=URL serves that group, a URL alone every group."""
    with ScriptedAgent(aggregate=lambda body: {"agent_metrics": {"mean/reward": 0.25}}) as server:
        agent = f"a={server.url}" if named else server.url
        result = aggregate(gym_shards, "--input", "rs*.jsonl", "--out", "m/all.jsonl", "--agent", agent)
        assert result.returncode == 0, result.stderr
        [body] = server.aggregate_bodies
    assert len(body["verify_responses"]) == 4
    [group] = json.loads((gym_shards / "m" / "all_aggregate_metrics.json").read_text())
    assert group["metrics_source"] == "server"


def test_every_input_adds_its_globs(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """A repeated --input silently kept only the last one's files."""
    write_rows(pytester.path / "data.jsonl", tasks(6))
    for k in range(3):
        run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={agent.url}",
            f"--rollouts-shard={k}/3",
            "--rollouts-no-aggregate",
            out=f"shards/shard-{k}.jsonl",
        )
    inputs = ("--input", "shards/shard-0.jsonl", "--input", "shards/shard-1.jsonl,shards/shard-2.jsonl")
    result = aggregate(pytester.path, *inputs, "--out", "m/all.jsonl", "--require-complete")
    assert result.returncode == 0, result.stderr
    assert "merged 3 inputs" in result.stdout


@pytest.mark.parametrize(
    ("inputs", "unmatched"),
    [
        (["rs*.jsonl", "typo/*.jsonl"], "'typo/*.jsonl'"),
        (["rs0.jsonl,typo/*.jsonl"], "'typo/*.jsonl'"),
        (["typo/*.jsonl", "typo2/*.jsonl"], "'typo/*.jsonl', 'typo2/*.jsonl'"),
        (["rs*_materialized_inputs.jsonl"], "'rs*_materialized_inputs.jsonl'"),
    ],
    ids=["two-inputs", "comma-separated", "none-matches", "sidecars-only"],
)
def test_a_glob_that_matches_no_input_is_named(gym_shards: Path, inputs: list[str], unmatched: str) -> None:
    """Only "no input files matched" was said, and only when no glob matched; a mistyped glob next
    to a good one merged a smaller run (NeMo Gym shards carry no manifest to tell)."""
    result = aggregate(gym_shards, *(a for i in inputs for a in ("--input", i)), "--out", "m/all.jsonl")
    assert result.returncode == 8, result.stdout
    assert f"no input files matched {unmatched} (in {gym_shards})" in result.stderr
    assert not (gym_shards / "m").exists(), "nothing is written"


def test_a_nan_threshold_is_a_usage_error(gym_shards: Path) -> None:
    """nan compares false with every mean: the merge's gate was silently off (exit 0)."""
    stderr = refused(gym_shards, "--input", "rs*.jsonl", "--out", "m/all.jsonl", "--fail-under", "nan")
    assert "--fail-under: must be a finite number" in stderr


@pytest.mark.parametrize("option", ["--fail-under", "--timeout", "--max-regression"])
def test_a_number_beyond_a_float_is_refused_in_the_runs_words(gym_shards: Path, option: str) -> None:
    """argparse read 1e400 as infinity and the message said "got inf": the value goes to the run's
    own parsing (the settings), which names what was typed, as --rollouts-fail-under does."""
    stderr = refused(gym_shards, "--input", "rs*.jsonl", "--out", "m/all.jsonl", f"{option}=1e400")
    assert f"{option}: must be a finite number; 1e400 is beyond the largest number a float holds" in stderr
    assert "inf" not in stderr


def test_the_merge_names_its_own_count_as_zero_option(tmp_path: Path) -> None:
    work = tmp_path / "work"
    rows = [{"_ng_task_index": t, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}} for t in range(2)]
    write_rows(work / "rs0_materialized_inputs.jsonl", rows)
    write_rows(work / "rs0.jsonl", [{**rows[0], "reward": 1.0}])
    write_rows(work / "rs0_failures.jsonl", [{**rows[1], "_ng_failure_class": "agent_run_error"}])
    result = aggregate(work, "--input", "rs0.jsonl", "--out", "m/all.jsonl", "--count-as-zero", "agent_run_error")
    assert result.returncode == 0, result.stderr
    assert "Scored as zero by --count-as-zero: 1 of 2 rollouts" in result.stdout


def test_a_single_run_that_was_not_sharded_is_rescored(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    """It was refused as 'not run with --rollouts-shard'."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}").assert_outcomes(passed=3)
    result = aggregate(pytester.path, "--input", "out/r.jsonl", "--out", "rescored/r.jsonl", "--require-complete")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"merged 1 input into {pytester.path / 'rescored' / 'r.jsonl'}\n")
    assert "default: mean reward 0.6667" in result.stdout
    assert "no run manifest" not in result.stdout


def test_an_earlier_output_is_moved_aside_or_overwritten(gym_shards: Path) -> None:
    """The merge wrote over results/all.jsonl; its stale sidecars stayed beside the new output."""
    earlier = {p.name: p.read_bytes() for p in (gym_shards / "results").iterdir()}
    result = aggregate(gym_shards, "--input", "rs*.jsonl", "--out", "results/all.jsonl")
    assert result.returncode == 0, result.stderr
    [aside] = (gym_shards / "results").glob("all.prev-*")
    assert {p.name: p.read_bytes() for p in aside.iterdir()} == earlier
    assert (
        f"earlier results were moved to {aside}; 1 earlier set is kept beside {gym_shards / 'results' / 'all.jsonl'} "
        "(--overwrite replaces them)"
    ) in result.stdout.splitlines()
    result = aggregate(gym_shards, "--input", "rs*.jsonl", "--out", "results/all.jsonl", "--overwrite")
    assert result.returncode == 0, result.stderr
    assert (
        f"earlier results at {gym_shards / 'results' / 'all.jsonl'} were deleted (--overwrite); "
        "1 earlier set is still kept beside it"
    ) in result.stdout.splitlines()
    assert len(list((gym_shards / "results").glob("all.prev-*"))) == 1


def test_every_option_has_help() -> None:
    [commands] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    options = commands.choices["aggregate"]._actions
    assert {"--overwrite", "--trust-shards"} <= {flag for option in options for flag in option.option_strings}
    assert all(option.help for option in options), [option.option_strings for option in options if not option.help]


@pytest.mark.parametrize("command", ["aggregate", "compare", "power", "report"])
def test_every_commands_help_prints(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A help text with "95% CI" crashed argparse's --help (it reads % as a format code)."""
    from pytest_rollouts.cli import main

    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "usage: pytest-rollouts " + command in capsys.readouterr().out


def test_shards_without_a_manifest_cannot_prove_the_run_complete(gym_shards: Path) -> None:
    """One NeMo Gym shard alone passed --require-complete."""
    for inputs in ("rs0.jsonl", "rs*.jsonl"):
        result = aggregate(gym_shards, "--input", inputs, "--out", "m/all.jsonl", "--require-complete")
        assert result.returncode == 6, result.stderr
        assert "that no shard is missing cannot be proven" in result.stdout
        assert "Pass --trust-shards to take these inputs as the whole run." in result.stderr
    trusted = aggregate(
        gym_shards, "--input", "rs*.jsonl", "--out", "m/all.jsonl", "--require-complete", "--trust-shards"
    )
    assert trusted.returncode == 0, trusted.stderr
    assert "that no shard is missing cannot be proven" in trusted.stdout


def test_a_bad_row_in_an_input_is_named_there_and_nothing_is_written(tmp_path: Path) -> None:
    """It was named in the merge's own output (re/c_failures.jsonl:3), which was left written, and a
    second try moved that aside without a word (found by a black-box review)."""
    rows = [{"_ng_task_index": t, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}} for t in range(2)]
    write_rows(tmp_path / "rs0_materialized_inputs.jsonl", rows)
    write_rows(tmp_path / "rs0.jsonl", [{**rows[0], "reward": 1.0}])
    (tmp_path / "rs0_failures.jsonl").write_text('{"_ng_task_index": 1, "_ng_rollout_index": 0}\ngarbage\n')
    for _ in range(2):
        result = aggregate(tmp_path, "--input", "rs0.jsonl", "--out", "re/c.jsonl")
        assert result.returncode != 0
        assert f"{tmp_path / 'rs0_failures.jsonl'}:2" in result.stderr, result.stderr
    assert not (tmp_path / "re").exists() or not list((tmp_path / "re").iterdir())


def test_aggregate_names_a_count_as_zero_typo_and_refuses_an_out_that_is_an_input(tmp_path: Path) -> None:
    """Found by a black-box review: the typo passed without a word (a run names it), and an --out
    naming one of the inputs read as 'missing shards: 0/2'."""
    rows = [{"_ng_task_index": t, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}} for t in range(2)]
    write_rows(tmp_path / "rs0_materialized_inputs.jsonl", rows)
    write_rows(tmp_path / "rs0.jsonl", [{**row, "reward": 1.0} for row in rows])
    typo = aggregate(tmp_path, "--input", "rs0.jsonl", "--out", "all/r.jsonl", "--count-as-zero", "agent_run_eror")
    assert typo.returncode == 0, typo.stderr
    assert "--count-as-zero agent_run_eror: no such failure class" in typo.stdout
    assert "did you mean agent_run_error?" in typo.stdout
    option = aggregate(tmp_path, "--input", "rs0.jsonl", "--out", "all/r.jsonl", "--count-as-zeor", "x")
    assert option.returncode == 4
    assert "unknown option --count-as-zeor: did you mean --count-as-zero?" in option.stderr
    missing = aggregate(tmp_path, "--count-as-zeor", "x")
    assert "did you mean --count-as-zero?" in missing.stderr, "named before the missing --input and --out"
    itself = aggregate(tmp_path, "--input", "rs0.jsonl", "--out", "rs0.jsonl")
    assert itself.returncode == 4
    assert "rs0.jsonl is one of the inputs ('rs0.jsonl'): name another output" in itself.stderr
    assert (tmp_path / "rs0.jsonl").exists() and not list(tmp_path.glob("rs0.prev-*"))
