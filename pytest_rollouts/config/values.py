"""Plain checks of option values: names and paths the run writes into its files (UTF-8 text),
finite numbers, agent addresses (http(s) URLs), and the failure limit.

Plain functions and values, without pydantic: the pytest side's collection (a dataset's name),
the suites' declarations and the ``aggregate`` command check by the same rules as the settings
model, whose pydantic types are apart (``agent_values.py``, ``fields.py``), and a session loads
pydantic only once it validates settings, after its dispatcher process has started.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pytest_rollouts.datatype import datatype
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


def not_utf8_why(value: Any) -> str:
    """Why a value given is refused, or "": every name and path given is text, as the run writes
    them into its files, which cannot hold what is not UTF-8 (``not_utf8``)."""
    bad = not_utf8_in(value)
    return (
        f"holds bytes that are not UTF-8 text ({bad}); the run writes it into its files: give it in UTF-8"
        if bad
        else ""
    )


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


@datatype
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
