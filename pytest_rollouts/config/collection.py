"""The Python API's whole-run config: the plugin's settings model, plus the datasets.

``run_from_config`` takes it; one set of names, defaults, bounds and messages with the plugin's
options, so a run described one way can be described the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from pytest_rollouts.config.errors import describe_errors
from pytest_rollouts.config.output_values import dataset_clash
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.options import OPTION

# How the Python API names each setting in messages: its own field names (``agents`` for the
# agents), not the plugin's ``--rollouts-*`` options.
API_NAMES = {name: name for name in OPTION} | {"agent": "agents", "input": "input"}
# NeMo Gym's names for fields of another name here: a config moved over is told the name to use.
NEMO_GYM_NAMES = {
    "num_repeats": "repeats",
    "num_repeats_add_seed": "repeats_add_seed",
    "environment_server_name": "environment_server",
    "materialized_jsonl_fpath": "materialized",
    "input_jsonl_fpath": "input",
    "output_jsonl_fpath": "out",
    "num_samples_in_parallel": "parallel",
    "max_resident_rollout_tasks": "max_resident",
}


class CollectionConfig(Settings):
    """A whole run for the Python API (``run_from_config``): the plugin's settings, with the same
    names, defaults and checks, and the datasets, which a pytest session takes as its arguments."""

    # The dataset files, in the order their tasks are numbered.
    input: tuple[Path, ...] = Field(min_length=1)

    def __init__(self, **given: Any) -> None:
        """Messages name the fields as the Python API spells them, and never echo a secret
        (pydantic's own message repeats every value given, passwords and header values included)."""
        renamed = [f"{name} is {NEMO_GYM_NAMES[name]} here" for name in given if name in NEMO_GYM_NAMES]
        if renamed:
            raise ValueError(f"invalid rollouts settings: NeMo Gym's names: {'; '.join(renamed)}")
        try:
            self.__pydantic_validator__.validate_python(given, self_instance=self, context={"sources": API_NAMES})
        except ValidationError as exc:
            raise ValueError(describe_errors(exc, API_NAMES)) from None

    @field_validator("input", mode="before")
    @classmethod
    def _one_or_more(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str | Path) else value

    @field_validator("input")
    @classmethod
    def _each_once(cls, paths: tuple[Path, ...]) -> tuple[Path, ...]:
        doubled = sorted({str(p) for p in paths if paths.count(p) > 1})
        if doubled:
            raise ValueError(f"{', '.join(doubled)} is given more than once")
        return paths

    @model_validator(mode="after")
    def _has_out(self) -> CollectionConfig:
        if self.out is None:
            raise ValueError("out names no output file: a run writes <stem>.jsonl and its sidecars there")
        clashes = (dataset_clash(path, self.paths, self.html, "out, html, materialized") for path in self.input)
        clash = next(filter(None, clashes), None)
        if clash:
            raise ValueError(clash)
        return self

    @property
    def agents(self) -> dict[str, str]:
        """The named agents and their URLs, as given to ``agents``."""
        return self.named_agent_urls

    @property
    def fallback_agent(self) -> str | None:
        """With exactly one agent, rows that name none (and no suite default) go to it, as an
        unnamed ``--rollouts-agent URL`` serves them in a pytest session."""
        named = self.named_agent_urls
        return next(iter(named)) if len(self.agent) == 1 and len(named) == 1 else None

    @property
    def agent_hint(self) -> str:
        return "agents={NAME: URL} with one agent, agent_map={'_default': NAME}"
