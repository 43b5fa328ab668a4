"""The report as one HTML file: the page's own CSS and JS inline, the run's data as JSON in
``<script type="application/json">`` tags. No CDN, no font, no request of any kind.

Row text is the agent's and the dataset's, so it must never become markup: the JSON escapes every
``<`` (a row holding ``</script>`` cannot end its tag), and the page inserts all of it as text.
"""

from __future__ import annotations

import html
from importlib import resources
from typing import Any

import orjson

from pytest_rollouts.config.values import readable

ASSETS = resources.files("pytest_rollouts.report") / "assets"


def render(title: str, data: dict[str, Any], details: dict[str, Any]) -> bytes:
    """The page: ``data`` (the summary, charts and table) read at load, ``details`` (each
    rollout's prompt, turns and fields) only when a rollout is first opened."""
    page = (ASSETS / "page.html").read_text(encoding="utf-8")
    css = (ASSETS / "report.css").read_text(encoding="utf-8")
    js = (ASSETS / "report.js").read_text(encoding="utf-8")
    head, tail = page.split("{{DATA}}")
    head = head.replace("{{TITLE}}", html.escape(readable(title))).replace("{{CSS}}", css)
    tail = tail.replace("{{JS}}", js)
    middle, tail = tail.split("{{DETAILS}}")
    return b"".join((head.encode(), script_json(data), middle.encode(), script_json(details), tail.encode()))


def script_json(value: Any) -> bytes:
    """``value`` as JSON safe inside a script element: every ``<`` (which JSON has only inside
    strings) written ``\\u003c``, so no text can close the element or open a comment. NaN and
    infinities become null (JSON has none); an integer beyond 64 bits or a float subclass is written
    through ``default``. A text no UTF-8 holds (a path of bytes that are not UTF-8, ``--title``'s
    too) is shown with escapes (``run\\xff``): orjson refuses it, and the page was a traceback."""
    try:
        encoded = orjson.dumps(value, default=_plain)
    except TypeError:
        encoded = orjson.dumps(_readable(value), default=_plain)
    return encoded.replace(b"<", b"\\u003c")


def _readable(value: Any) -> Any:
    if isinstance(value, str):
        return readable(value)
    if isinstance(value, dict):
        return {readable(str(key)): _readable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_readable(item) for item in value]
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return float(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, frozenset | set | tuple):
        return sorted(value, key=str) if not isinstance(value, tuple) else list(value)
    return str(value)
