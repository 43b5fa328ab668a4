"""The run's settings from their sources, each option's weakest first: ini, environment, command line.

Kept apart from the model (``settings.py``), which validates one set of values: here each source is
parsed on its own, so an error names the source it came from, and a keyed option's entries from
several sources combine entry by entry (see ``options.Option``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from pydantic import ValidationError

from pytest_rollouts.config.errors import describe_errors
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.options import OPTIONS


class SettingsError(ValueError):
    """Values no run can use; the message names where each was given."""


# Where a value was given ("--rollouts-parallel", "env ...", "ini ...") and the value.
Layer = tuple[str, Any]


def settings_from_layers(layers: Mapping[str, list[Layer]]) -> tuple[Settings, dict[str, str]]:
    """The settings from each option's sources, weakest first, and the source each value kept
    came from; ``SettingsError`` names every bad one. A keyed option's entries combine across its
    sources (see ``Option``); any other option takes its strongest source whole."""
    raw: dict[str, Any] = {}
    source: dict[str, str] = {}
    for option in OPTIONS:
        found = layers.get(option.name, [])
        if option.keyed and len(found) > 1:
            raw[option.name], source[option.name] = combine_layers(option.name, found)
        elif found:
            source[option.name], raw[option.name] = found[-1]
    try:
        return Settings.model_validate(raw, context={"sources": source}), source
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, source)) from None


def combine_layers(name: str, layers: list[Layer]) -> tuple[Any, str]:
    """A keyed option's entries from all its sources, and the sources whose entries are kept.

    Each source is parsed on its own, so an error names it and a key given twice within it is
    still refused; then a stronger source's entry replaces a weaker one's with the same key.
    """
    merged: dict[Hashable, Any] = {}
    owner: dict[Hashable, str] = {}
    for where, value in layers:
        parsed = _parse_alone(name, value, where)
        entries = parsed if isinstance(parsed, dict) else {entry.key: entry for entry in parsed}
        merged.update(entries)
        owner.update(dict.fromkeys(entries, where))
    combined = merged if isinstance(parsed, dict) else tuple(merged.values())
    kept = set(owner.values())
    return combined, " and ".join(where for where, _ in layers if where in kept)


def _parse_alone(name: str, value: Any, where: str) -> Any:
    """One source's value of option ``name``, through the model's own validators."""
    try:
        return getattr(Settings.model_validate({name: value}, context={"sources": {name: where}}), name)
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, {name: where})) from None


def with_defaults(settings: Settings, values: Mapping[str, Any], where: str) -> Settings:
    """``settings``, with ``values`` for the options not given (a head server's collection keys, a
    suite's), checked as given ones are: one more layer, under every source the user gave.
    ``ValueError`` names ``where`` and the key."""
    taken = {name: value for name, value in values.items() if name not in settings.model_fields_set}
    if taken.get("environment_routing_mode", settings.environment_routing_mode) != "legacy":
        taken.pop("environment_server", None)  # only legacy routing reads it: a run's other mode wins
    if not taken:
        return settings
    fields = {name: getattr(settings, name) for name in settings.model_fields_set}
    sources = {**settings.sources, **{name: f"{name} of {where}" for name in taken}}
    try:
        return type(settings).model_validate({**fields, **taken}, context={"sources": sources})
    except ValidationError as exc:
        raise ValueError(describe_errors(exc, sources)) from None
