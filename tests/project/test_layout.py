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
