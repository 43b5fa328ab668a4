"""The run's settings from pytest's sources: ini < environment < command line, resolved once."""

from __future__ import annotations

import os
from typing import Any

import pytest

from pytest_rollouts.config.layers import Layer, settings_from_layers, with_defaults
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.option import Option
from pytest_rollouts.options import OPTIONS

# Options naming a file whose relative path is read, on the command line, from where pytest
# started, and elsewhere (ini, environment) from the rootdir.
PLACED = ("out", "html", "materialized", "cache")


def resolve_settings(config: pytest.Config) -> Settings:
    """Build the settings from ``config``, or raise ``pytest.UsageError`` (exit 4)."""
    here = config.invocation_params.dir
    try:
        settings, source = settings_from_layers({option.name: _layers(config, option) for option in OPTIONS})
        if settings.out is None:  # checked as a given value is: the report may not replace it either
            default = os.path.relpath(config.rootpath / "results" / "rollouts.jsonl", here)
            settings = with_defaults(settings, {"out": default}, "the rootdir")
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    placed = {name: here / getattr(settings, name) for name in PLACED if getattr(settings, name) is not None}
    settings = settings.model_copy(update=placed)
    if settings.out is not None and settings.out.is_dir():
        raise pytest.UsageError(
            f"{source.get('out', 'out')}: {settings.out} is a directory; name the output file in it"
        )
    return settings


def _layers(config: pytest.Config, option: Option) -> list[Layer]:
    """Where ``option`` is set, and to what, weakest first: ini, env, command line.

    An empty ini or env value is unset; an empty command-line value (``--rollouts-out=``) was
    typed, so it is validated.
    """
    found: list[tuple[str, Any]] = [
        (f"ini {option.ini}", config.getini(option.ini)),
        (f"env {option.env}", os.environ.get(option.env) if option.env else None),
    ]
    layers = [(where, value) for where, value in found if value not in (None, "", [])]
    if option.name in PLACED:
        layers = [(where, _from_rootdir(config, value)) for where, value in layers]
    value = config.getoption("rollouts_" + option.name)
    if value not in (None, []):
        layers.append((option.cli, value))
    return layers


def _from_rootdir(config: pytest.Config, value: str) -> str:
    """An ini or environment path, read from the rootdir, as a path from where pytest started: the
    model's checks (a report that would replace one of the run's files) read paths from here."""
    if not value.strip() or os.path.isabs(value):
        return value
    return os.path.relpath(config.rootpath / value, config.invocation_params.dir)
