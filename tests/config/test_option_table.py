"""One source per option: the settings model, ``--help`` and the options reference all come from
the option table in ``options.py``, and fail here when one of them disagrees with it."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_rollouts.config.collection import CollectionConfig
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.options import OPTIONS, reference

from ..helpers import QUIET

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "options.md"


def _squeezed(text: str) -> str:
    """``text`` without whitespace: help wrapped at any width still contains what it says."""
    return "".join(text.split())


def test_the_settings_model_has_the_tables_names_defaults_and_descriptions() -> None:
    """The API's ``CollectionConfig`` is the model the plugin validates into: one set of names and
    defaults, and the datasets, which a pytest session takes as its arguments."""
    assert issubclass(CollectionConfig, Settings)
    assert set(Settings.model_fields) == {option.name for option in OPTIONS}
    assert set(CollectionConfig.model_fields) - set(Settings.model_fields) == {"input"}
    for option in OPTIONS:
        field = Settings.model_fields[option.name]
        assert field.get_default(call_default_factory=True) == option.default, option.name
        assert field.description == option.described, option.name
    unset = Settings()
    assert {option.name: getattr(unset, option.name) for option in OPTIONS} == {o.name: o.default for o in OPTIONS}


def test_the_options_reference_is_the_one_the_table_generates() -> None:
    """``docs/options.md`` is regenerated with the command it names; a stale one fails here."""
    generated = subprocess.run(
        [sys.executable, "-m", "pytest_rollouts.options"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert generated == "\n".join(reference()) + "\n"
    assert REFERENCE.read_text() == generated, "run: python -m pytest_rollouts.options > docs/options.md"
    for option in OPTIONS:  # every name, variable and default is in the reference as the table has it
        [row] = [line for line in generated.splitlines() if line.startswith((f"| `{option.cli} ", f"| `{option.cli}`"))]
        cells = [cell.strip() for cell in row.split(" | ")]
        assert cells[1].startswith(f"`{option.ini}`"), row
        assert cells[2] == (f"`{option.env}`" if option.env else ""), row
        assert cells[3] == (option.shown_default or ""), row


def test_help_shows_each_options_ini_twin_variable_and_default(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*QUIET, "--help")
    shown = _squeezed(result.stdout.str())
    for option in OPTIONS:
        assert option.cli in shown and option.ini in shown
        assert _squeezed(option.described) in shown, option.name
    assert _squeezed("Default: 64.") in shown and _squeezed("Env NEMO_GYM_MAX_ROLLOUT_ATTEMPTS.") in shown


def test_the_settings_model_is_made_from_evaluated_annotations() -> None:
    """Every run builds the model: postponed, its sixty annotations were each compiled on its own by
    pydantic (a tenth of what building the model cost)."""
    postponed = [name for name, annotation in inspect.get_annotations(Settings).items() if isinstance(annotation, str)]
    assert postponed == []
