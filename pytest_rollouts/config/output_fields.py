"""The field types of the options that say where a scored run goes besides its own files:
``--rollouts-html``, ``--rollouts-wandb``, ``--rollouts-mlflow``, and ``--rollouts-cache``.

``Annotated`` with their checks (as ``dataset_values.py``), so what would only fail once the whole
run is over is refused before anything is sent. Apart from the checks of where a run may write
(``output_values.py``), which the pytest side's collection calls without loading pydantic.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field


def _report_file(value: Any) -> Any:
    """A file: an empty value or a directory would leave the report nowhere to go, found only at the end."""
    if isinstance(value, str | Path) and (not str(value).strip() or Path(value).is_dir()):
        raise ValueError("must name the report's HTML file")
    return value


def _installed(package: str) -> AfterValidator:
    """An export whose package is missing is refused, naming the extra that installs it. Looked up,
    not imported: importing either package costs seconds."""

    def check(value: str | None) -> str | None:
        if value is not None and importlib.util.find_spec(package) is None:
            raise ValueError(f"needs the {package} package: pip install 'pytest-rollouts[{package}]'")
        return value

    return AfterValidator(check)


def _cache_folder(value: Any) -> Any:
    """A folder, there or not yet: an empty value or a file would leave the replies nowhere to go."""
    if isinstance(value, str | Path) and not str(value).strip():
        raise ValueError("must name the cache's folder")
    if isinstance(value, str | Path) and Path(value).exists() and not Path(value).is_dir():
        raise ValueError(f"{value} is a file, not a folder for the model cache")
    return value


ReportPath = Annotated[Path | None, BeforeValidator(_report_file)]
CacheFolder = Annotated[Path | None, BeforeValidator(_cache_folder)]
WandbProject = Annotated[str | None, Field(min_length=1), _installed("wandb")]
MlflowExperiment = Annotated[str | None, Field(min_length=1), _installed("mlflow")]
