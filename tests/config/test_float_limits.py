"""A number beyond a float's range (``1e400``, which Python reads as infinity) is said as what it is.

It was called "not finite" where ``1e300`` was told the bound (``--rollouts-timeout``), "must be a
number at least 0" (``--max-regression``, ``--delta``: infinity is at least 0), and "LO < HI"
(``--rollouts-reward-range 0,1e400``, ``0,inf``): each message contradicted the value given."""

from __future__ import annotations

import pytest

from pytest_rollouts.cli import main

from ..helpers import QUIET

BEYOND = "1e400 is beyond the largest number a float holds (about 1.8e+308)"


@pytest.mark.parametrize(
    ("option", "words"),
    [
        ("--rollouts-timeout=1e400", f"--rollouts-timeout: must be a finite number; {BEYOND}"),
        ("--rollouts-fail-under=1e400", f"--rollouts-fail-under: must be a finite number; {BEYOND}"),
        ("--rollouts-reward-range=0,1e400", f"--rollouts-reward-range: must be two finite numbers, LO,HI; {BEYOND}"),
        ("--rollouts-reward-range=0,inf", "--rollouts-reward-range: must be two finite numbers, LO,HI"),
    ],
)
def test_a_session_says_a_number_beyond_a_float_is_one(pytester: pytest.Pytester, option: str, words: str) -> None:
    result = pytester.runpytest(*QUIET, "--rollouts-agent=http://127.0.0.1:9", "--rollouts-out=o/r.jsonl", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert words in result.stderr.str(), result.stderr.str()
    assert "LO < HI" not in result.stderr.str()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["compare", "a.jsonl", "b.jsonl", "--max-regression", "1e400"],
            f"--max-regression: must be a finite number, got '1e400'; {BEYOND}",
        ),
        (["compare", "a.jsonl", "b.jsonl", "--reward-range", "0,1e400"], f"got '1e400'; {BEYOND}"),
        (["compare", "a.jsonl", "b.jsonl", "--reward-range", "0,inf"], "got 'inf'"),
        (["power", "a.jsonl", "--delta", "1e400"], f"--delta: must be a finite number, got '1e400'; {BEYOND}"),
        (
            ["power", "a.jsonl", "--correlation=-1e400"],
            f"--correlation: must be a finite number, got '-1e400'; -{BEYOND}",
        ),
    ],
)
def test_compare_and_power_say_a_number_beyond_a_float_is_one(
    capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    try:
        code = main(args)
    except SystemExit as refused:  # argparse's refusal of an option's value
        code = refused.code
    err = capsys.readouterr().err
    assert code == 4
    assert words in err, err
    assert "at least 0" not in err and "above 0" not in err and "LO < HI" not in err
