"""A run's files never land on its own dataset: ``--rollouts-out data.jsonl`` moved the dataset
aside as an earlier output (then failed, unable to read it), and ``--rollouts-html data.jsonl``
wrote the report over it, the dataset lost. Refused before anything is touched (exit 4)."""

from __future__ import annotations

import pytest

from pytest_rollouts import CollectionConfig

from ..agents import ScriptedAgent
from ..helpers import QUIET, tasks, write_rows


@pytest.mark.parametrize(
    "options",
    [
        ["--rollouts-out=data.jsonl"],
        ["--rollouts-out=./data.jsonl"],
        ["--rollouts-out=o/r.jsonl", "--rollouts-html=data.jsonl"],
        ["--rollouts-out=o/r.jsonl", "--rollouts-materialized=data.jsonl"],
        ["--rollouts-out=x.jsonl", "x.jsonl"],  # a second dataset
    ],
)
def test_a_run_file_that_is_a_dataset_of_the_run_is_refused(pytester: pytest.Pytester, options: list[str]) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    write_rows(pytester.path / "x.jsonl", tasks(1))
    before = {path.name: path.read_bytes() for path in pytester.path.iterdir()}
    with ScriptedAgent() as agent:
        result = pytester.runpytest(*QUIET, "data.jsonl", f"--rollouts-agent={agent.url}", *options)
        assert agent.requests == []
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert "is a dataset of this run and one of the files it writes" in result.stderr.str()
    assert {path.name: path.read_bytes() for path in pytester.path.iterdir()} == before


def test_the_python_api_refuses_it_too(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "data.jsonl", tasks(3))
    for given in ({"out": "data.jsonl"}, {"out": "o/r.jsonl", "html": "data.jsonl"}):
        with pytest.raises(ValueError, match=r"data.jsonl is a dataset of this run .*\(out, html, materialized\)"):
            CollectionConfig(input="data.jsonl", agents={"a": "http://127.0.0.1:9"}, **given)
