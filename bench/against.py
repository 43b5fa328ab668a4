"""An older commit's tree, run beside this checkout's in the same invocation (``--against REF``).

The tree is exported with ``git archive`` into the bench's scratch directory (the checkout is not
touched) and put first on ``PYTHONPATH`` for that variant's runs, ahead of the editable install;
the dispatcher process it starts imports from the same place, as ``spawn_engine`` arranges.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

from harness import HERE


@dataclass(frozen=True)
class Tree:
    """An exported commit: its short name, and the directory to put on ``PYTHONPATH``."""

    name: str
    path: Path

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with this tree imported ahead of the installed package."""
        return {**base, "PYTHONPATH": os.pathsep.join(filter(None, (str(self.path), base.get("PYTHONPATH"))))}

    def offers(self, name: str) -> bool:
        """Whether the tree's package has ``name`` at its top (the Python API is younger than the plugin)."""
        probe = [sys.executable, "-c", f"import pytest_rollouts as p; p.{name}"]
        # Run in the tree itself: ``-c`` puts the working directory first on the path, and from a
        # checkout that would import the checkout's package, not this tree's.
        env = self.env(dict(os.environ))
        return subprocess.run(probe, env=env, cwd=self.path, capture_output=True).returncode == 0


def export_tree(ref: str, work: Path) -> Tree:
    """``ref``'s ``pytest_rollouts`` under ``work``; ``SystemExit`` when git cannot name or export it."""
    git = ["git", "-C", str(HERE.parent)]
    named = subprocess.run([*git, "rev-parse", "--short", f"{ref}^{{commit}}"], capture_output=True, text=True)
    if named.returncode != 0:
        raise SystemExit(f"--against {ref}: {named.stderr.strip()}")
    name = named.stdout.strip()
    archive = subprocess.run([*git, "archive", name, "pytest_rollouts"], capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"--against {ref}: {archive.stderr.decode(errors='replace').strip()}")
    dest = work / f"tree-{name}"
    dest.mkdir()
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return Tree(name, dest)
