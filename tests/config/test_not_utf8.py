"""Names that are not UTF-8 text: bytes an OS hands over as they are (``$'\\xff'`` in a shell), which
Python keeps as lone surrogates (``\\udcff``). The run writes its names and paths into its files as
text, which cannot hold them: it ended in an INTERNALERROR (exit 3), its lock and ``.prepared``
left behind. Such a name is refused before anything is written or sent (exit 4, the option named),
except where it is only shown: ``report --title``, and a run found at such a path, which ``report``
shows with escapes (``\\xff``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_rollouts import CollectionConfig
from pytest_rollouts.cli import main

from ..agents import ScriptedAgent
from ..helpers import QUIET, tasks, write_rows

BYTE = "\udcff"  # the byte 0xff, as Python keeps it in an argument or a file name


def session(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", *QUIET, *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, errors="backslashreplace", timeout=120)


@pytest.mark.parametrize(
    ("dataset", "options", "named"),
    [
        (
            "data.jsonl",
            [f"--rollouts-out=out/r{BYTE}.jsonl"],
            "--rollouts-out: holds bytes that are not UTF-8 text (\\xff)",
        ),
        (
            "data.jsonl",
            [f"--rollouts-agent={BYTE}=URL", f"--rollouts-agent-map=_default={BYTE}", "--rollouts-out=out/r.jsonl"],
            "--rollouts-agent: holds bytes that are not UTF-8 text (\\xff)",
        ),
        (
            f"d{BYTE}.jsonl",
            ["--rollouts-agent=URL", "--rollouts-out=out/r.jsonl"],
            "d\\xff.jsonl: its name holds bytes",
        ),
    ],
    ids=["out", "agent", "dataset"],
)
def test_a_name_that_is_not_utf8_is_refused_before_anything_is_written(
    tmp_path: Path, dataset: str, options: list[str], named: str
) -> None:
    write_rows(tmp_path / dataset, tasks(3))
    with ScriptedAgent() as agent:
        result = session(tmp_path, dataset, *(option.replace("URL", agent.url) for option in options))
        assert agent.requests == [] and agent.health_checks == 0
    said = result.stdout + result.stderr
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, said
    assert named in said and "INTERNALERROR" not in said and "Traceback" not in said
    assert sorted(os.listdir(tmp_path)) == [os.fsdecode(dataset)], "nothing written: no lock, no .prepared"


def test_a_run_in_a_directory_whose_name_is_not_utf8_is_refused_unless_its_output_is_elsewhere(tmp_path: Path) -> None:
    """Its output's absolute path, which the run records, holds the byte (the dispatcher's plan
    could not be sent: an INTERNALERROR)."""
    inside = tmp_path / f"evals{BYTE}"
    write_rows(inside / "data.jsonl", tasks(3))
    with ScriptedAgent() as agent:
        refused = session(inside, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-out=out/r.jsonl")
        elsewhere = session(inside, "data.jsonl", f"--rollouts-agent={agent.url}", f"--rollouts-out={tmp_path}/r.jsonl")
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout + refused.stderr
    assert "--rollouts-out: its absolute path holds bytes that are not UTF-8 (\\xff)" in refused.stdout + refused.stderr
    assert os.listdir(inside) == ["data.jsonl"]
    assert elsewhere.returncode == 0, elsewhere.stdout + elsewhere.stderr
    with pytest.raises(ValueError, match=r"out: holds bytes that are not UTF-8 text \(\\xff\)"):
        CollectionConfig(input="data.jsonl", out=f"r{BYTE}.jsonl", agents={"a": "http://127.0.0.1:9"})


def test_report_shows_a_title_and_a_run_path_that_are_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``report --title $'\\xff'`` and a run found under such a path (NeMo Gym's, or an earlier
    version's) were tracebacks."""
    run = tmp_path / f"run{BYTE}"
    write_rows(run / "data.jsonl", tasks(3))
    with ScriptedAgent() as agent:
        made = session(run, "data.jsonl", f"--rollouts-agent={agent.url}", f"--rollouts-out={tmp_path}/r.jsonl")
    assert made.returncode == 0, made.stdout + made.stderr
    for name in os.listdir(tmp_path):
        if name.startswith("r_") or name == "r.jsonl":
            os.replace(tmp_path / name, run / name)
    capsys.readouterr()
    page = tmp_path / "page.html"
    assert main(["report", str(run / "r.jsonl"), "-o", str(page), "--title", f"evals {BYTE}"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    text = page.read_text()
    assert "<title>evals \\xff</title>" in text and "run\\\\xff" in text
