"""The run manifest: a fingerprint of the inputs and options that shape the materialized set.

Resume trusts ``<stem>_materialized_inputs.jsonl``; the manifest is how it knows the
dataset and options still describe that set, and how task indices stay the ones the
first run gave, whichever files this session happens to collect (``--lf`` skips some).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from pytest_rollouts.store.jsonl import replaced_atomically


class ManifestError(ValueError):
    pass


class DatasetEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    sha256: str
    rows: int
    first_task: int
    agents: list[str]
    # Rollouts its rows make (repeats per agent, fan-out copies); None in manifests from before fan-out.
    rollouts: int | None = None
    # The split its suite or head server declares it in, and the prompt template that built its
    # rows' input (as given, and its hash): None where there is none, as in older manifests.
    split: str | None = None
    prompt_config: str | None = None
    prompt_sha256: str | None = None


class RunManifest(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: int = 1
    datasets: list[DatasetEntry]
    shape: dict[str, Any]
    # The run's split (``--rollouts-split``, or the one its datasets share); None: undeclared or mixed.
    split: str | None = None
    # Where the materialized inputs are, relative to the manifest, when not beside the output
    # (``--rollouts-materialized``): resume and ``aggregate`` read it (``ArtifactPaths``).
    materialized: str | None = None
    # The materialized rows' digest once written (``rows_digest``): a resume refuses another run's file there.
    materialized_digest: str | None = None
    # Agent to the environment server its unstamped rows went through (agent routing, ``plan.build.fronted_by``):
    # readers of the files alone group those rows under the server, as the run scored them.
    fronted_by: dict[str, str] = {}

    def entry(self, path: str) -> DatasetEntry | None:
        return next((d for d in self.datasets if d.path == path), None)

    def next_task(self) -> int:
        return max((d.first_task + d.rows for d in self.datasets), default=0)


def differences(recorded: RunManifest, current: RunManifest) -> list[str]:
    """What changed since the recorded run, in words a user can act on."""
    names = dict.fromkeys([*current.shape, *recorded.shape])  # an option dropped since is a change too
    found = [
        f"{name}: recorded {recorded.shape.get(name)!r}, now {current.shape.get(name)!r}"
        for name in names
        if recorded.shape.get(name) != current.shape.get(name)
    ]
    if recorded.split != current.split:
        found.append(f"split: recorded {recorded.split or 'none'}, now {current.split or 'none'}")
    for now in current.datasets:
        then = recorded.entry(now.path)
        if then is None:
            found.append(f"dataset {now.path} is not part of the recorded run")
            continue
        if then.sha256 != now.sha256 or then.rows != now.rows:
            found.append(
                f"dataset {now.path} changed: recorded {then.rows} rows sha256 {then.sha256[:12]}, "
                f"now {now.rows} rows sha256 {now.sha256[:12]}"
            )
        if then.prompt_sha256 != now.prompt_sha256:
            found.append(
                f"dataset {now.path}'s prompt template changed: recorded {_template(then)}, now {_template(now)}"
            )
        if then.agents != now.agents:
            found.append(f"dataset {now.path} routes to agents {now.agents}, recorded {then.agents}")
    return found


def _template(entry: DatasetEntry) -> str:
    if entry.prompt_sha256 is None:
        return "none"
    return f"{entry.prompt_config} sha256 {entry.prompt_sha256[:12]}"


def read_manifest(path: Path) -> RunManifest | None:
    if not path.exists():
        return None
    try:
        return RunManifest.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise ManifestError(
            f"{path}: not a run manifest ({exc.error_count()} errors: {exc.errors()[0]['msg']})"
        ) from None


def write_manifest(path: Path, manifest: RunManifest) -> None:
    with replaced_atomically(path) as out:
        out.write((manifest.model_dump_json(indent=2) + "\n").encode())
