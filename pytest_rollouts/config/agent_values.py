"""The agents' addresses and headers the options give (``--rollouts-agent``, ``--rollouts-agent-header``),
as the settings model holds them: pydantic models, each entry keyed so a source's entries combine.

Apart from the plain checks they use (``values.py``), which the pytest side's collection and the
suites' declarations call without loading pydantic.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, PlainSerializer, SecretStr

from pytest_rollouts.config.values import check_url
from pytest_rollouts.net.address import without_password

# A URL as a settings dump writes it (``model_dump``, ``model_dump_json``): without its password,
# which a dump logged or saved with a script's config would otherwise carry.
Url = Annotated[str, PlainSerializer(without_password, return_type=str)]


class AgentAddress(BaseModel):
    """One ``--rollouts-agent`` value: an unnamed one sets the default agent."""

    model_config = ConfigDict(frozen=True)

    name: str | None
    url: Url

    @classmethod
    def parse(cls, text: str) -> AgentAddress:
        name, sep, rest = text.partition("=")
        if sep and name and not any(c in name for c in ":/"):
            return cls(name=name.strip(), url=check_url(rest.strip()))
        return cls(name=None, url=check_url(text.strip()))

    @property
    def key(self) -> str | None:
        return self.name

    def __repr_args__(self) -> Iterator[tuple[str, Any]]:
        """Without the URL's password: a settings object printed or logged must not show it."""
        yield "name", self.name
        yield "url", without_password(self.url)

    def clash(self, earlier: AgentAddress) -> str:
        which = "the default agent" if self.name is None else f"agent {self.name}"
        return f"{which} is given twice ({without_password(earlier.url)} and {without_password(self.url)})"


class AgentHeader(BaseModel):
    """One ``--rollouts-agent-header [AGENT:]NAME=VALUE``; ``${ENV_VAR}`` in ``VALUE`` is read from the environment.

    The value is a ``SecretStr`` so no repr, log line or validation error can print it.
    """

    model_config = ConfigDict(frozen=True)

    agent: str | None
    name: str
    value: SecretStr

    @classmethod
    def parse(cls, text: str) -> AgentHeader:
        target, sep, value = text.partition("=")
        agent, colon, name = target.rpartition(":")
        name = name.strip()
        if not sep or not _TOKEN.fullmatch(name):
            raise ValueError("an agent header looks like NAME=VALUE or AGENT:NAME=VALUE (value not shown)")
        unset = sorted({var for var in _ENV_REF.findall(value) if var not in os.environ})
        if unset:
            raise ValueError(f"header {name}: environment variable {', '.join(unset)} is not set")
        value = _ENV_REF.sub(lambda ref: os.environ[ref[1]], value.strip())
        if not _HEADER_VALUE.fullmatch(value):
            raise ValueError(f"header {name}: a value must be one line of printable latin-1 text (value not shown)")
        return cls(agent=agent.strip() or None if colon else None, name=name, value=SecretStr(value))

    @property
    def key(self) -> tuple[str | None, str]:
        """Header names are case-insensitive: ``authorization`` replaces ``Authorization``."""
        return self.agent, self.name.lower()

    def clash(self, earlier: AgentHeader) -> str:
        if self.value.get_secret_value() == earlier.value.get_secret_value():
            return ""  # the same header, its name in another case: HTTP reads them as one
        scope = f"{self.agent}:" if self.agent else ""
        return f"header {scope}{self.name} is given twice with different values (not shown)"


class Keyed(Protocol):
    """An entry of a keyed repeatable option (see ``Option.keyed``)."""

    @property
    def key(self) -> Hashable: ...

    def clash(self, earlier: Any) -> str:
        """Why this entry and an earlier one with its key cannot both come from one place, or ""
        when they only differ in how they are written."""
        ...


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# RFC 9110 field-value characters: visible ASCII, space, tab and obs-text; no line breaks.
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def parse_agent_headers(specs: Iterable[str | AgentHeader]) -> tuple[AgentHeader, ...]:
    """Header specs, one per item or line (the option, its env variable, the aggregate CLI); blank
    ones skipped, parsed ones kept."""
    return tuple(each_parsed([s for s in specs if not isinstance(s, str) or s.strip()], AgentHeader.parse))


def each_parsed(value: Any, parse: Callable[[str], Any]) -> Any:
    """The items of a repeatable option, parsed; items that already are models pass through."""
    if isinstance(value, (list, tuple)):
        return tuple(parse(v) if isinstance(v, str) else v for v in value)
    return value


def once_per_key(entries: tuple[Keyed, ...]) -> tuple[Keyed, ...]:
    """Two values for one key in one place is a mistake to point out, not a silent last-wins,
    as a key mapped twice is (a stronger source overriding a weaker one is by design)."""
    chosen: dict[Hashable, Keyed] = {}
    for entry in entries:
        earlier = chosen.setdefault(entry.key, entry)
        if earlier != entry and (why := entry.clash(earlier)):
            raise ValueError(why)
    return tuple(chosen.values())
