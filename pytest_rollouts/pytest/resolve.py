"""The run's settings from pytest's sources: ini < environment < command line, resolved once."""

from __future__ import annotations

import os
from typing import Any

import pytest

from pytest_rollouts.config.layers import Layer, SettingsError, settings_from_layers
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.options import OPTIONS, Option


def resolve_settings(config: pytest.Config) -> Settings:
    """Build the settings from ``config``, or raise ``pytest.UsageError`` (exit 4)."""
    try:
        settings, source = settings_from_layers({option.name: _layers(config, option) for option in OPTIONS})
    except SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None
    if settings.out is None:
        settings = settings.model_copy(update={"out": config.rootpath / "results" / "rollouts.jsonl"})
    elif not settings.out.is_absolute():
        base = config.invocation_params.dir if "out" in source and source["out"].startswith("--") else config.rootpath
        settings = settings.model_copy(update={"out": base / settings.out})
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
    value = config.getoption("rollouts_" + option.name)
    if value not in (None, []):
        layers.append((option.cli, value))
    return layers
