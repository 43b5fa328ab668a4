"""The report never costs a run its files: where it may be written, and what writing it does to links,
devices and missing folders; the gates ``report`` judges a finished run by."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pytest_rollouts import CollectionConfig
from pytest_rollouts.cli import main

from ..agents import ScriptedAgent
from ..helpers import QUIET, embedded, run_rollouts, tasks, write_rows
from .sample_run import make_run


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["-o", "out/r.jsonl"], "-o: out/r.jsonl is one of RUN's files"),
        (["-o", "out/r_materialized_inputs.jsonl"], "-o: out/r_materialized_inputs.jsonl is one of RUN's files"),
        (["-o", "out/r_aggregate_metrics.json"], "is one of RUN's files"),
        (["--baseline", "base/r.jsonl", "-o", "base/r_failures.jsonl"], "is one of the baseline's files"),
    ],
)
def test_report_refuses_to_replace_a_runs_own_files(
    here: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    """``-o out/r.jsonl`` replaced the run's results with its own report, exit 0."""
    make_run(here, out="base/r.jsonl", flipped=True)
    make_run(here)
    before = {path: path.read_bytes() for path in here.glob("*/r*")}
    capsys.readouterr()
    assert main(["report", "out/r.jsonl", *args]) == 4
    assert said in capsys.readouterr().err
    assert {path: path.read_bytes() for path in here.glob("*/r*")} == before


def test_rollouts_html_may_not_name_the_runs_files_nor_the_baselines(pytester: pytest.Pytester) -> None:
    """--rollouts-html=out/r.jsonl overwrote the results it had just written and exited 0."""

    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent() as agent:
        assert run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", out="base/r.jsonl").ret == 0
        for html, said in (("out/r.jsonl", "this run's files"), ("base/r.jsonl", "the baseline's files")):
            result = run_rollouts(
                pytester,
                "data.jsonl",
                f"--rollouts-agent={agent.url}",
                f"--rollouts-html={html}",
                "--rollouts-baseline=base/r.jsonl",
            )
            assert result.ret == 4
            result.stderr.fnmatch_lines([f"*--rollouts-html: {html} is one of {said}; the report would replace it*"])
            assert agent.keys().count((0, 0)) == 1, "nothing sent after the first run"
    assert not (pytester.path / "out").exists()
    with pytest.raises(ValueError, match="is one of this run's files"):
        CollectionConfig(
            input="data.jsonl", out="out/r.jsonl", html="out/r_run_manifest.json", agents={"a": "http://127.0.0.1:9"}
        )


@pytest.mark.parametrize(
    ("ini", "args", "shown"),
    [
        ("", [], "../results/rollouts.jsonl"),  # the default output, under the rootdir
        ("", ["--rollouts-out=../out/r.jsonl"], "../out/r_failures.jsonl"),
    ],
    ids=["default-out", "out-on-the-command-line"],
)
def test_an_ini_report_path_is_checked_where_it_is_written_from_a_subdirectory(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ini: str, args: list[str], shown: str
) -> None:
    """An ini ``rollouts_html`` is read from the rootdir, but was checked from the current
    directory: run from a subdirectory, the report replaced the results (or failures) it names."""

    html = shown.removeprefix("../")
    pytester.makeini(f"[pytest]\nrollouts_html = {html}\n")
    data = write_rows(pytester.path / "data.jsonl", tasks(2))
    monkeypatch.chdir(pytester.mkdir("sub"))
    with ScriptedAgent() as agent:
        result = pytester.runpytest(*QUIET, str(data), f"--rollouts-agent={agent.url}", *args)
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*ini rollouts_html: {shown} is one of this run's files; the report would replace*"])
    assert agent.requests == []
    assert sorted(p.name for p in pytester.path.rglob("*") if p.is_file()) == ["data.jsonl", "tox.ini"]


def test_an_ini_report_path_is_read_from_the_rootdir_and_a_command_line_output_from_here(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same names under two directories are two files: no clash (it was refused as one)."""

    pytester.makeini("[pytest]\nrollouts_html = out/r_failures.jsonl\n")
    data = write_rows(pytester.path / "data.jsonl", tasks(2))
    sub = pytester.mkdir("sub")
    monkeypatch.chdir(sub)
    with ScriptedAgent() as agent:
        result = pytester.runpytest(*QUIET, str(data), f"--rollouts-agent={agent.url}", "--rollouts-out=out/r.jsonl")
    assert result.ret == 0, result.outlines[-10:] + result.errlines[-10:]
    result.stdout.fnmatch_lines(["rollouts: report written to ../out/r_failures.jsonl"])
    assert (pytester.path / "out/r_failures.jsonl").read_text().startswith("<!DOCTYPE html>")
    assert (sub / "out/r_failures.jsonl").read_text() == ""
    assert len((sub / "out/r.jsonl").read_text().splitlines()) == 2


def test_report_writes_through_a_link_and_into_a_device(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A link was replaced by a regular file (its target left as it was), and ``-o /dev/full`` put a
    regular file where the device was, exit 0."""
    make_run(here)
    (here / "pages").mkdir()
    (here / "pages/real.html").write_text("old")
    os.symlink(here / "pages/real.html", here / "link.html")
    assert main(["report", "out/r.jsonl", "-o", "link.html"]) == 0
    assert (here / "link.html").is_symlink()
    assert (here / "pages/real.html").read_text().startswith("<!DOCTYPE html>")
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    capsys.readouterr()
    assert main(["report", "out/r.jsonl", "-o", "/dev/full"]) == 1
    assert "cannot write /dev/full" in capsys.readouterr().err
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode), "still the device"


def test_report_says_why_it_cannot_write_or_read_without_a_traceback(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(here)
    capsys.readouterr()
    assert main(["report", "out/r.jsonl", "-o", "out/r.jsonl/x.html"]) == 1, "a file where a folder should be"
    err = capsys.readouterr().err
    assert "cannot write out/r.jsonl/x.html" in err and "Traceback" not in err
    assert main(["report", "out"]) == 4
    assert "RUN: out is a directory; name a run's <stem>.jsonl" in capsys.readouterr().err


def test_report_judges_by_the_gates_it_is_given(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run that failed --rollouts-max-failures read 'passed' when rebuilt: ``report`` could not be
    given that gate."""
    make_run(here)
    assert main(["report", "out/r.jsonl", "-o", "r.html", "--max-failures", "1"]) == 0
    gates = embedded((here / "r.html").read_bytes(), "report-data")["summary"]["gates"]
    assert gates["exit_code"] == 9
    capsys.readouterr()
    assert main(["report", "out/r.jsonl", "--max-failures", "-3"]) == 4
    assert "--max-failures" in capsys.readouterr().err
