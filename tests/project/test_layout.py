"""The pipeline's dependency direction holds: the contracts in pyproject.toml, checked by import-linter."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports")
    assert lint is not None, "import-linter is a test dependency: pip install -e '.[test]'"
    result = subprocess.run([lint, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_is_a_newcomers_page_with_two_quick_start_commands() -> None:
    """Reference material lives in docs/; the README stays short enough to read in one go."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) < 12_000, "README.md over 12 KB: move reference material to docs/"
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for line in quick_start.splitlines() if line.startswith("    ")]
    assert len(commands) == 2, commands
    assert commands[1] == "pip install -e '.[test]' && python -m pytest tests -q -n auto"
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert all(part in ci for part in commands[1].split(" && ")), "CI runs the README's test command"
