"""A developer's shell cannot change test results: the plugin's variables never reach a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL = {"ROLLOUTS_AGENT_HEADERS": "X-Key=from-a-shell", "NEMO_GYM_MAX_ROLLOUT_ATTEMPTS": "1", "ROLLOUTS_ANY": "x"}


def test_no_plugin_variable_reaches_a_test() -> None:
    leaked = sorted(name for name in SHELL if name in os.environ)
    assert leaked == [], leaked


def test_a_shell_that_sets_them_changes_nothing() -> None:
    """The test above, run in a session whose shell set every one of them."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"{__file__}::test_no_plugin_variable_reaches_a_test",
        ],
        cwd=REPO,
        env={**os.environ, **SHELL},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
