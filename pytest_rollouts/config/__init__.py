"""What a run is asked to do: settings, suite declarations, routing, head-server discovery, embedded agents."""

from functools import cache
from pathlib import Path

# A suite's declaration: which files of its directory are datasets, and who serves them. Here, in
# the package's light ``__init__``, so the plugin checks file names and finds a dataset's
# declaration without importing pydantic (``config/suite.py`` reads one only when there is one).
DECLARATION = "rollouts.toml"


@cache
def find_declaration(directory: Path, stop: Path) -> Path | None:
    """The nearest ``rollouts.toml`` at or above ``directory``, not looking above ``stop``."""
    candidate = directory / DECLARATION
    if candidate.is_file():
        return candidate
    if directory == stop or directory.parent == directory:
        return None
    return find_declaration(directory.parent, stop)


class SuiteError(Exception):
    """A declaration that cannot be used; the message names the file."""
