"""The values of the options whose entries are more than a string: agent addresses, headers, and
the failure limit.

Apart from the settings model so the places that take such values elsewhere (``rollouts.toml``
agents, the ``aggregate`` command's headers) parse them by the same rules.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Protocol
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, SecretStr

from pytest_rollouts.net.address import ascii_host, without_password
from pytest_rollouts.store.jsonl import LONE_SURROGATE


def not_utf8(text: str) -> str:
    """What in ``text`` no UTF-8 text holds, as escapes (``\\xff``); "" when it is text. A name the
    run writes into its files (JSON, the report, an export) must be text: written, such a name
    ended the run in an INTERNALERROR, its lock left behind."""
    return "".join(dict.fromkeys(_escaped(c) for c in LONE_SURROGATE.findall(text)))


def not_utf8_in(value: Any) -> str:
    """``not_utf8`` of every string and path in a value as given: one, or lists and maps of them."""
    if isinstance(value, str | Path):
        return not_utf8(str(value))
    if isinstance(value, Mapping):
        return not_utf8_in([*value.keys(), *value.values()])
    if isinstance(value, list | tuple | set | frozenset):
        return "".join(dict.fromkeys(bad for item in value if (bad := not_utf8_in(item))))
    return ""


def utf8_text(value: Any) -> Any:
    """Every name and path given is text: the run writes them into its files, which cannot hold
    what is not UTF-8 (``not_utf8``)."""
    bad = not_utf8_in(value)
    if bad:
        raise ValueError(
            f"holds bytes that are not UTF-8 text ({bad}); the run writes it into its files: give it in UTF-8"
        )
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


def check_recorded_path(value: Any) -> None:
    """A file whose absolute path the run records (its output, the materialized inputs: the
    dispatcher's plan, the manifest) must be text there too: a relative path given in UTF-8 is
    not, in a directory whose name is not."""
    if isinstance(value, str | Path):
        bad = not_utf8(str(Path(value).absolute()))
        if bad:
            raise ValueError(
                f"its absolute path holds bytes that are not UTF-8 ({bad}), and the run records it: "
                "give a path in UTF-8 (from a directory whose name is)"
            )


def readable(text: str) -> str:
    """``text`` as a terminal can show it: what is not UTF-8 as escapes (``d\\xff.jsonl``)."""
    return LONE_SURROGATE.sub(lambda found: _escaped(found.group()), text)


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def finite_number(text: str) -> float:
    """``text`` as a finite number; ``ValueError`` in words otherwise. A number too large for a
    float (``1e400``) reads as infinity: said as what it is, not as "not finite" alone, which
    contradicted the bound said of ``1e300``."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {text!r}{beyond_float(text)}")
    return value


def beyond_float(given: object) -> str:
    """What to add when ``given``, typed as a finite number, is beyond a float's range; else ""."""
    if not isinstance(given, str):
        return ""
    try:
        overflows = math.isinf(float(given)) and "inf" not in given.lower()
    except ValueError:
        return ""
    limit = f"{sys.float_info.max:.1e}"
    return f"; {given.strip()} is beyond the largest number a float holds (about {limit})" if overflows else ""


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


def check_url(url: str) -> str:
    """An agent address (command line, ini or ``rollouts.toml``): another scheme would fail only at
    run time, after every retry."""
    parts = urlsplit(url)
    shown = without_password(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"agent address {shown!r} is not an http(s) URL with a host")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(f"agent address {shown!r} has a bad port") from None
    if parts.netloc.endswith(":"):
        raise ValueError(f"agent address {shown!r} has an empty port")
    if parts.fragment or url.endswith("#"):
        raise ValueError(f"agent address {shown!r} has a #fragment, which no request carries")
    if any(char.isspace() for char in url):  # a stray space would end up in every request line
        raise ValueError(f"agent address {shown!r} has a space in it")
    try:
        ascii_host(parts.hostname)
    except ValueError:
        raise ValueError(f"agent address {shown!r} has a host that is no domain name (IDNA)") from None
    return url.rstrip("/")


@dataclass(frozen=True)
class FailureLimit:
    """``--rollouts-max-failures``: the failed rollouts a run may have, as a count or as a percentage
    of the materialized ones (inspect_ai's ``--fail-on-error`` does the same with a fraction)."""

    count: int | None = None
    percent: float | None = None

    @classmethod
    def parse(cls, value: Any) -> Any:
        """``N`` (an int, for the Python API, or its text) or ``P%``, 0 <= P <= 100; anything else
        as it is, for the model to refuse by its type."""
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            return value
        text = value.strip()
        try:
            number = float(text[:-1]) if text.endswith("%") else int(text)
        except ValueError:
            number = -1
        if not (0 <= number <= (100 if text.endswith("%") else math.inf)):
            raise ValueError(f"must be a count N >= 0 or a percentage P% with 0 <= P <= 100, not {value!r}")
        return cls(percent=float(number)) if text.endswith("%") else cls(count=int(number))

    def allows(self, failed: int, expected: int) -> bool:
        if self.percent is not None:
            return failed * 100 <= self.percent * expected
        return failed <= (self.count or 0)

    def __str__(self) -> str:
        return f"{self.percent:g}%" if self.percent is not None else str(self.count)


# The settings field's type: its text parsed before pydantic checks it is a ``FailureLimit``.
MaxFailures = Annotated[FailureLimit | None, BeforeValidator(FailureLimit.parse)]
