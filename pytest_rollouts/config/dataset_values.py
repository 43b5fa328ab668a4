"""The values of the options that say how a run reads its datasets and where their inputs go:
``--rollouts-split``, ``--rollouts-prompt-config``, ``--rollouts-materialized``.

Each is a field type of the settings model (``Annotated`` with its check), so the plugin's options
and the Python API's ``CollectionConfig`` refuse a bad value alike, naming where it was given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator

from pytest_rollouts.config.values import check_recorded_path


def _reject_example_split(value: Any) -> Any:
    """As NeMo Gym's ``_reject_example_split``: ``example`` is a dataset type, not a split a run
    asks for, and gets the recipe rather than a bare list of the allowed values."""
    if isinstance(value, str) and value.strip() == "example":
        raise ValueError(
            "example is not a split a run asks for: example datasets are committed smoke-test samples, "
            "not prepared train/validation/benchmark splits. To run one, name its file: "
            "pytest path/to/example.jsonl --rollouts-agent URL"
        )
    return value.strip() if isinstance(value, str) else value


def _template_reads(value: Path | None) -> Path | None:
    """A template that cannot be read or says nothing usable is refused before anything runs."""
    if value is not None:
        from pytest_rollouts.rows.prompts import PromptError, load_template

        try:
            load_template(value)
        except PromptError as exc:
            raise ValueError(str(exc)) from None
    return value


def _jsonl_file(value: Any) -> Any:
    """A JSONL file, like the output: it is read back by offset on resume and by aggregate."""
    if isinstance(value, str | Path) and (not str(value).endswith(".jsonl") or Path(value).name == ".jsonl"):
        raise ValueError("must name a file, <name>.jsonl")
    check_recorded_path(value)
    return value


Split = Annotated[Literal["train", "validation", "benchmark"] | None, BeforeValidator(_reject_example_split)]
TemplatePath = Annotated[Path | None, AfterValidator(_template_reads)]
MaterializedPath = Annotated[Path | None, BeforeValidator(_jsonl_file)]
