"""Where a setting comes from: ini, then the environment, then the command line.

A keyed repeatable option (agents by name, headers by agent and name, map and fan-out
keys) combines its sources, the stronger one overriding an entry with the same key;
within one source, one key given two values is a usage error naming that source.
"""

from __future__ import annotations

import pytest

from .conftest import tasks, write_rows
from .helpers import run_rollouts

ONE, TWO = "http://127.0.0.1:1", "http://127.0.0.1:2"


@pytest.mark.parametrize(
    ("ini", "args", "message"),
    [
        # The last one silently won.
        (
            "",
            [f"--rollouts-agent={ONE}", f"--rollouts-agent={TWO}"],
            f"--rollouts-agent: the default agent is given twice ({ONE} and {TWO})",
        ),
        (
            f"rollouts_agent =\n    {ONE}\n    {TWO}\n",
            [],
            f"ini rollouts_agent: the default agent is given twice ({ONE} and {TWO})",
        ),
        (
            "",
            [f"--rollouts-agent=b={ONE}", f"--rollouts-agent=b={TWO}"],
            f"--rollouts-agent: agent b is given twice ({ONE} and {TWO})",
        ),
        (
            "",
            ["--rollouts-agent-header=X-Key=one", "--rollouts-agent-header=x-key=two"],
            "--rollouts-agent-header: header x-key is given twice with different values (not shown)",
        ),
    ],
)
def test_one_key_given_two_values_in_one_source_is_a_usage_error(
    pytester: pytest.Pytester, ini: str, args: list[str], message: str
) -> None:
    pytester.makeini(f"[pytest]\n{ini}")
    write_rows(pytester.path / "data.jsonl", tasks(1))
    result = run_rollouts(pytester, "data.jsonl", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])
