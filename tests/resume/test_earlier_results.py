"""A fresh run over earlier results: a plain line says where they went and how many earlier sets
pile up beside the output, ``--rollouts-overwrite`` deletes them instead, and neither is a warning
(``-W error`` used to end every rerun in INTERNALERROR after the files were moved)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

import pytest_rollouts

from ..agents import Reply, ScriptedAgent
from ..helpers import QUIET, Artifacts, keys, run_rollouts, tasks, write_rows

MOVED = (
    "rollouts: earlier results were moved to out/r.prev-*; {kept} kept beside out/r.jsonl "
    "(--rollouts-resume continues a run instead, --rollouts-overwrite replaces them)"
)


def test_moving_aside_is_a_line_not_a_warning_and_counts_the_earlier_sets(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}").assert_outcomes(passed=2)
    for kept in ("1 earlier set is", "2 earlier sets are"):
        result = run_rollouts(pytester, "-W", "error", "data.jsonl", f"--rollouts-agent={agent.url}")
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        result.stdout.fnmatch_lines([MOVED.format(kept=kept)])
        assert "INTERNALERROR" not in result.stdout.str() and "warnings summary" not in result.stdout.str()
    assert len(list((pytester.path / "out").glob("r.prev-*"))) == 2


def test_overwrite_deletes_the_earlier_results_instead(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    result = run_rollouts(
        pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-limit=1", "--rollouts-overwrite"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["rollouts: earlier results at out/r.jsonl were deleted (--rollouts-overwrite)"])
    assert not list((pytester.path / "out").glob("r.prev-*"))
    assert not [p for p in (pytester.path / "out").iterdir() if "replaced" in p.name], "gone once the run sent"
    assert keys(Artifacts(pytester.path).rows) == [(0, 0)]
    assert keys(Artifacts(pytester.path).materialized) == [(0, 0)]


def test_overwrite_refused_before_any_request_keeps_the_earlier_results(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """What --rollouts-overwrite replaces waits until the first request; a failed health check comes
    before anything is replaced, and leaves it as it was."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}").assert_outcomes(passed=3)
    before = {p.name: p.read_bytes() for p in (pytester.path / "out").iterdir() if not p.name.startswith(".")}
    agent.health = Reply(status=503, raw=b"warming up")
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-overwrite")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    assert "deleted" not in result.stdout.str() and "back in place" not in result.stdout.str()
    after = {p.name: p.read_bytes() for p in (pytester.path / "out").iterdir() if not p.name.startswith(".")}
    assert after == before
    assert not [p for p in (pytester.path / "out").iterdir() if "replaced" in p.name]


def test_overwrite_with_resume_is_a_usage_error_that_touches_nothing(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(2))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    before = {p: p.read_bytes() for p in (pytester.path / "out").iterdir()}
    sent = len(agent.requests)
    result = run_rollouts(
        pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume", "--rollouts-overwrite"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--rollouts-resume continues the earlier results and --rollouts-overwrite deletes them; give one of them*"]
    )
    assert {p: p.read_bytes() for p in (pytester.path / "out").iterdir()} == before
    assert len(agent.requests) == sent


def test_under_xdist_the_line_shows_once_on_the_controller(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(6))
    args = (*QUIET, "-n", "2", "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-out=out/r.jsonl")
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=6)
    result = pytester.runpytest_subprocess(*args, "-p", "no:benchmark", "-W", "error")  # its own warning under -n
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines([MOVED.format(kept="1 earlier set is")])
    assert result.stdout.str().count("earlier results were moved") == 1


def test_the_python_api_overwrites_too(agent: ScriptedAgent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "data.jsonl", tasks(2))
    config = {"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"policy": agent.url}}
    pytest_rollouts.run(config)
    with pytest.warns(pytest_rollouts.CollectionWarning, match=r"were deleted \(overwrite=True\)"):
        pytest_rollouts.run({**config, "overwrite": True})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="give one of them"):
            pytest_rollouts.run({**config, "overwrite": True, "resume": True})
    assert not list((tmp_path / "out").glob("r.prev-*"))


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file and folder under ``root``, hidden ones too (folders as None)."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def copied_run(root: Path, agent: ScriptedAgent) -> None:
    """A finished run's files as a copy or a merge has them: without the hidden files a session leaves."""
    config = {"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"default": agent.url}, "repeats": 2}
    write_rows(root / "data.jsonl", tasks(2))
    shutil.rmtree(root / "out", ignore_errors=True)
    pytest_rollouts.run(config)
    (root / "out/r.jsonl").write_bytes((root / "out/r.jsonl").read_bytes().split(b"\n", 1)[1])  # one to resume
    for hidden in (root / "out").glob(".*"):
        hidden.unlink()


def damage(root: Path) -> None:
    with open(root / "out/r_materialized_inputs.jsonl", "a") as recorded:
        recorded.write("{}\n")


SICK = Reply(status=503, json={"status": "down"})


def test_a_session_refused_before_any_request_leaves_the_place_as_it_found_it(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """A refusal after the output was locked left ``.r.jsonl.lock`` and ``.r.jsonl.prepared`` (and
    the folder made for them) beside an output that had none."""
    write_rows(pytester.path / "data.jsonl", tasks(2))
    with ScriptedAgent(health=SICK) as sick:
        fresh = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={sick.url}")
        assert fresh.ret == pytest.ExitCode.INTERRUPTED
        assert not (pytester.path / "out").exists()
        for agent_url, broken, ret in ((sick.url, None, 2), (agent.url, damage, 4)):
            copied_run(pytester.path, agent)
            if broken is not None:
                broken(pytester.path)
            before = snapshot(pytester.path / "out")
            resume = ("--rollouts-resume", "--rollouts-repeats=2")
            result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent_url}", *resume)
            assert result.ret == ret
            assert snapshot(pytester.path / "out") == before
    assert len(agent.requests) == 2 * 4, "only the copied runs' own"


def test_a_python_api_run_refused_before_any_request_leaves_the_place_as_it_found_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: ScriptedAgent
) -> None:
    monkeypatch.chdir(tmp_path)
    with ScriptedAgent(health=SICK) as sick:
        for agent_url, broken, said in ((sick.url, None, "health check"), (agent.url, damage, "cannot resume")):
            copied_run(tmp_path, agent)
            if broken is not None:
                broken(tmp_path)
            before = snapshot(tmp_path / "out")
            config = {"input": "data.jsonl", "out": "out/r.jsonl", "agents": {"default": agent_url}, "repeats": 2}
            with pytest.raises(pytest_rollouts.CollectionRefused, match=said):
                pytest_rollouts.run({**config, "resume": True})
            assert snapshot(tmp_path / "out") == before
    assert len(agent.requests) == 2 * 4, "only the copied runs' own"
