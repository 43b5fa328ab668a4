"""One option as the table in ``options.py`` declares it (its names, default, environment variable
and help), how options from several sources combine, and the reference page written from the
table. Plain data, imported by every pytest session."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import UnionType
from typing import Any

from pytest_rollouts.datatype import datatype


@datatype(frozen=True)
class Option:
    """One setting, reachable as ``--rollouts-<name>``, as ini ``rollouts_<name>`` and, with ``env``,
    as that environment variable; ``default`` is what the settings model holds when none is given.

    A ``keyed`` repeatable option's entries each carry a key (an agent's name, a header's agent
    and name, a routing key), so its sources combine: ini, then env, then the command line, an
    entry replacing a weaker source's entry with the same key. Any other option takes its
    strongest source whole: an unkeyed list (checks, failure classes) has no key by which the
    command line could take back an ini entry, so it replaces the ini list instead.
    """

    name: str
    help: str
    metavar: str | None = None
    flag: bool = False
    repeatable: bool = False
    keyed: bool = False
    env: str | None = None
    default: Any = None
    # A default the run works out (from the rootdir, from other options, from the run itself),
    # said in words where ``default`` is None.
    computed_default: str | None = None
    # What only the options reference says: the fine print --help has no room for.
    details: str = ""

    def __post_init__(self) -> None:
        """A flag is off unless given: its default says so, in the model as in the table."""
        if self.flag:
            object.__setattr__(self, "default", False)

    @property
    def cli(self) -> str:
        return "--rollouts-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "rollouts_" + self.name

    @property
    def ini_type(self) -> str | UnionType:
        """A flag's ini value that pytest cannot read as a bool stays a string, which the settings
        model then refuses naming the ini key (pytest's own error names no key). Needs pytest 9.2."""
        if self.flag:
            return bool | str
        return "linelist" if self.repeatable else "string"

    @property
    def shown_default(self) -> str | None:
        """The default as help and the reference show it; None for an option that is off or empty
        unless given."""
        if self.computed_default is not None:
            return self.computed_default
        if self.flag or not isinstance(self.default, int | float | str):  # off, unset, or an empty collection
            return None
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)

    @property
    def argparse_help(self) -> str:
        """The help as argparse takes it, which reads ``%`` as a format code ("95% CI" crashed ``--help``)."""
        return self.help.replace("%", "%%")

    @property
    def described(self) -> str:
        """The help ``--help`` shows for the option and its ini twin: what it does, the variable
        it is also read from, and its default."""
        parts = [self.help]
        if self.env:
            parts.append(f"Env {self.env}.")
        if self.shown_default is not None:
            parts.append(f"Default: {self.shown_default}.")
        return " ".join(parts)


PRECEDENCE = """\
Every option has an ini twin under `[tool.pytest.ini_options]` (or `[pytest]`). The command line
wins over the environment (for options that have a variable), which wins over ini. Repeatable
options keyed by name (`--rollouts-agent`, `--rollouts-agent-map`, `--rollouts-fan-out`,
`--rollouts-agent-header`) combine their sources instead: ini, then env, then the command line,
a later entry replacing an earlier one with the same key (an agent's name, a header's agent and
name, case-insensitive, a map or fan-out key). Other repeatable options take the strongest
source whole. Within one source, one key given two different values is a usage error. Values are
validated up front: a bad one is a usage error (exit 4) that names the option, variable or ini key.
The Python API's `CollectionConfig` takes the same names and defaults."""


def option_reference(options: Iterable[Option]) -> Iterator[str]:
    """The options reference (``docs/options.md``), line by line, from ``options`` (the table)."""
    yield "# Options"
    yield ""
    yield "<!-- Generated from pytest_rollouts/options.py: python -m pytest_rollouts.options > docs/options.md -->"
    yield ""
    yield PRECEDENCE
    yield ""
    yield "| option | ini | environment | default | meaning |"
    yield "|---|---|---|---|---|"
    for option in options:
        flag = f"`{option.cli}{' ' + option.metavar if option.metavar else ''}`".replace("|", "\\|")
        ini = f"`{option.ini}`" + (" (one per line)" if option.repeatable else "")
        env = f"`{option.env}`" if option.env else ""
        default = option.shown_default or ""
        meaning = " ".join(part for part in (option.help, option.details) if part)
        meaning = meaning.replace("|", "\\|").replace("<", "\\<")  # <stem> is no HTML tag
        yield f"| {flag} | {ini} | {env} | {default} | {meaning} |"
