"""Merge shard outputs into one run, after proving that together they are exactly the whole run.

Shards come from ``--rollouts-shard K/N`` (each records its shard and the run's
fingerprint in its manifest) or from NeMo Gym (no manifest: the union of their
materialized inputs is taken as the run, which nothing can prove complete). One run that
was not sharded merges as itself, to be rescored. Any missing or doubled shard, any key in two
shards, any key of the run in none, a result row twice or of a key its shard did not
materialize, or a fingerprint that differs is named, and nothing is written.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections import Counter, defaultdict
from collections.abc import Collection
from pathlib import Path
from typing import BinaryIO

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.manifest import ManifestError, RunManifest, differences, read_manifest, write_manifest
from pytest_rollouts.rows.resume import Key, key_of
from pytest_rollouts.store.artifacts import (
    FAILURES,
    MATERIALIZED,
    ArtifactPaths,
    artifact_rows,
    read_rows,
    rows_digest,
    torn_tail,
)
from pytest_rollouts.store.jsonl import JsonlError, replaced_atomically

SIDECAR_SUFFIXES = (FAILURES, MATERIALIZED)
SHOWN = 10


class MergeError(Exception):
    """The inputs do not form one complete run; the message lists every problem found."""


@datatype(frozen=True)
class Shard:
    paths: ArtifactPaths
    manifest: RunManifest | None

    @property
    def name(self) -> str:
        return str(self.paths.out)

    @property
    def shard(self) -> tuple[int, int] | None:
        value = self.manifest.shape.get("shard") if self.manifest else None
        if not value:
            return None
        k, n = str(value).split("/")
        return int(k), int(n)


class OutputIsInput(ValueError):
    """``--out`` names a file an ``--input`` matches: a usage error, not inputs that miss a shard."""


def find_inputs(values: list[str], out: Path) -> list[Path]:
    """The globs of every ``--input`` (each comma-separated), sorted and deduplicated; sidecars and
    the merged output are not inputs. A glob that matches no input is named: a mistyped one would
    otherwise merge a smaller run, which shards without a manifest cannot tell."""
    patterns = [p.strip() for value in values for p in value.split(",") if p.strip()]
    if not patterns:
        raise MergeError("--input names no file or glob")
    skip = {p.resolve() for p in ArtifactPaths(out).all()}
    found: set[Path] = set()
    unmatched = []
    for pattern in patterns:
        paths = {Path(m).resolve() for m in glob.glob(pattern, recursive=True)}
        if out.resolve() in paths:  # it would be moved aside, and the merge read as missing a shard
            raise OutputIsInput(f"--out {out} is one of the inputs ({pattern!r}): name another output")
        matched = {p for p in paths if _is_input(p, skip)}
        if not matched:
            unmatched.append(pattern)
        found |= matched
    if unmatched:
        raise MergeError(f"no input files matched {', '.join(map(repr, unmatched))} (in {Path.cwd()})")
    return sorted(found)


def _is_input(path: Path, skip: set[Path]) -> bool:
    return path not in skip and not path.name.endswith(SIDECAR_SUFFIXES) and path.is_file()


def load_shards(inputs: list[Path]) -> list[Shard]:
    shards = []
    for path in inputs:
        paths = ArtifactPaths(path)
        try:
            shards.append(Shard(paths, read_manifest(paths.manifest)))
        except ManifestError as exc:
            raise MergeError(str(exc)) from None
    return shards


def check(shards: list[Shard]) -> tuple[RunManifest | None, list[str]]:
    """Every problem that keeps these shards from being one run, and the merged manifest."""
    if not shards:
        return None, ["no input files matched"]
    # Before anything is read for the checks below, or written: a merge refused part-way through
    # its writes would leave some merged files replaced and others not.
    torn = [
        f"{path}: the last line is cut short; resume that shard first (it repairs it)"
        for shard in shards
        for path in (shard.paths.out, shard.paths.failures)
        if torn_tail(path)
    ]
    torn += [
        # Written whole, never appended to: resume cannot repair it (it refuses to go on).
        f"{shard.paths.materialized}: the last line is cut short, so the file was damaged: restore it, "
        "or run that shard afresh"
        for shard in shards
        if torn_tail(shard.paths.materialized)
    ]
    if torn:
        return None, torn
    foreign = _not_their_inputs(shards)
    if foreign:
        return None, foreign
    unreadable = _unreadable(shards)
    if unreadable:
        return None, unreadable
    problems: list[str] = []
    with_manifest = [s for s in shards if s.manifest is not None]
    if with_manifest and len(with_manifest) != len(shards):
        missing = ", ".join(s.name for s in shards if s.manifest is None)
        problems.append(f"some inputs have no run manifest: {missing}")
    merged = None
    if with_manifest:
        first = with_manifest[0]
        assert first.manifest is not None
        merged = _unsharded(first.manifest)
        for other in with_manifest[1:]:
            assert other.manifest is not None
            for difference in differences(merged, _unsharded(other.manifest)):
                problems.append(f"{other.name} is not from the same run as {first.name}: {difference}")
        problems += _shard_ids(with_manifest)
        # Each shard records the servers its own tasks went through: the merged run went through them all.
        fronted = {a: server for s in with_manifest if s.manifest for a, server in s.manifest.fronted_by.items()}
        merged = merged.model_copy(update={"fronted_by": fronted})
    keys_by_shard = {s.name: _materialized_keys(s.paths.materialized) for s in shards}
    owners: dict[Key, list[str]] = defaultdict(list)
    for name, keys in keys_by_shard.items():
        for key in keys:
            owners[key].append(name)
    doubled = sorted(key for key, names in owners.items() if len(names) > 1)
    if doubled:
        shown = "; ".join(f"{key} in {', '.join(owners[key])}" for key in doubled[:SHOWN])
        problems.append(f"{len(doubled)} rollout keys are in more than one shard: {shown}" + _more(doubled))
    if merged is not None:
        problems += _missing(merged, owners.keys())
    problems += _stray_rows(shards, keys_by_shard)
    return merged, problems


def _stray_rows(shards: list[Shard], keys_by_shard: dict[str, list[Key]]) -> list[str]:
    """Result rows twice, or of keys their shard never materialized (a file edited or appended to
    by hand): the merged file is what is kept and scored, so it must hold each key once."""
    seen: dict[Key, str] = {}
    doubled: list[str] = []
    foreign: list[str] = []
    for shard in shards:
        own = set(keys_by_shard[shard.name])
        for row in read_rows(shard.paths.out):
            key = key_of(row)
            if key not in own:
                foreign.append(f"{key} in {shard.name}")
            elif key in seen:
                doubled.append(f"{key} in {shard.name}")
            else:
                seen[key] = shard.name
    problems = []
    if doubled:
        problems.append(f"{len(doubled)} result rows repeat a key: {'; '.join(doubled[:SHOWN])}" + _more(doubled))
    if foreign:
        shown = "; ".join(foreign[:SHOWN])
        problems.append(
            f"{len(foreign)} result rows are of keys their shard never materialized: {shown}" + _more(foreign)
        )
    return problems


def _unsharded(manifest: RunManifest) -> RunManifest:
    """A shard's manifest as the merged run's: no shard, and its materialized inputs beside the
    merged output (where ``write_merged`` puts them), wherever each shard kept its own."""
    return manifest.model_copy(
        update={"shape": {**manifest.shape, "shard": None}, "materialized": None, "materialized_digest": None}
    )


def _shard_ids(shards: list[Shard]) -> list[str]:
    """Shards of one cut, each once, none missing. One input run without ``--rollouts-shard`` is a
    whole run on its own: rescored (other options, another output), it merges as itself."""
    problems = []
    ids = [(s.shard, s.name) for s in shards]
    unsharded = [name for shard, name in ids if shard is None]
    if unsharded and len(shards) > 1:
        problems.append(f"inputs not run with --rollouts-shard: {', '.join(unsharded)}")
    counts = {shard[1] for shard, _ in ids if shard is not None}
    if len(counts) > 1:
        problems.append(f"shards were cut into different counts: {sorted(counts)}")
    if len(counts) == 1:
        (count,) = counts
        seen: dict[int, list[str]] = defaultdict(list)
        for shard, name in ids:
            if shard is not None:
                seen[shard[0]].append(name)
        absent = [f"{k}/{count}" for k in range(count) if k not in seen]
        if absent:
            problems.append(f"missing shards: {', '.join(absent)}")
        for k, names in sorted(seen.items()):
            if len(names) > 1:
                problems.append(f"shard {k}/{count} appears more than once: {', '.join(names)}")
    return problems


def _materialized_keys(path: Path) -> list[Key]:
    return [key_of(row) for row in read_rows(path)]


def _missing(manifest: RunManifest, found: Collection[Key]) -> list[str]:
    """Keys of the whole run that no shard holds, by name when one repeat count fits every task.

    With per-agent repeats or fan-out a task's keys depend on its row, so each dataset's
    recorded rollout count is what the shards must add up to (doubles are caught apart).
    """
    repeats = manifest.shape.get("repeats")
    if isinstance(repeats, int) and not manifest.shape.get("fan_out"):
        tasks = (t for d in manifest.datasets for t in range(d.first_task, d.first_task + d.rows))
        full = {(t, r) for t in tasks for r in range(repeats)}
        missing = sorted(full - set(found))
        if not missing:
            return []
        shown = ", ".join(map(str, missing[:SHOWN]))
        return [f"{len(missing)} rollout keys of the run are in no shard: {shown}" + _more(missing)]
    problems = []
    per_task = Counter(t for t, _ in found)
    for d in manifest.datasets:
        if d.rollouts is None:
            continue
        held = sum(per_task[t] for t in range(d.first_task, d.first_task + d.rows))
        if held < d.rollouts:
            problems.append(f"{d.rollouts - held} of the {d.rollouts} rollouts of {d.path} are in no shard")
    return problems


def _more(items: list[Key] | list[str]) -> str:
    return f" (and {len(items) - SHOWN} more)" if len(items) > SHOWN else ""


def _not_their_inputs(shards: list[Shard]) -> list[str]:
    """Materialized inputs missing, or not the file their shard's run wrote (the digest its manifest
    records): two runs given one ``--rollouts-materialized`` leave one run's rows under the other."""
    problems = []
    for shard in shards:
        place = Path(os.path.normpath(shard.paths.materialized))
        recorded = shard.manifest.materialized_digest if shard.manifest else None
        if not place.exists():
            problems.append(f"{shard.name}: its materialized inputs {place} are missing: restore them")
        elif recorded is not None and rows_digest(place) != recorded:
            problems.append(
                f"{place}: not the materialized inputs {shard.name}'s run wrote (their rows' digest is not the one its "
                "manifest records): another run wrote its own there, or the file was edited"
            )
    return problems


def _unreadable(shards: list[Shard]) -> list[str]:
    """Lines that are not JSON objects, named in their input: found only when the merged copy was
    scored, they were named in the merged file, which the merge had already written."""
    problems = []
    for shard in shards:
        for path in (shard.paths.out, shard.paths.failures):
            try:
                for _ in artifact_rows(path):
                    pass
            except JsonlError as exc:
                problems.append(str(exc))
    return problems


def write_merged(shards: list[Shard], manifest: RunManifest | None, out: ArtifactPaths) -> None:
    """Concatenate each artifact across shards; a shard whose last line is cut short is refused."""
    out.out.parent.mkdir(parents=True, exist_ok=True)
    for target, source in (
        (out.out, lambda p: p.out),
        (out.failures, lambda p: p.failures),
        (out.beside_materialized, lambda p: p.materialized),
    ):
        with replaced_atomically(target) as sink:
            for shard in shards:
                _copy_whole_lines(source(shard.paths), sink)
    if manifest is not None:
        fingerprint = rows_digest(out.beside_materialized)
        write_manifest(out.manifest, manifest.model_copy(update={"materialized_digest": fingerprint}))


def _copy_whole_lines(path: Path, sink: BinaryIO) -> None:
    """``check`` has refused shards whose files end in a cut line."""
    if path.exists():
        with open(path, "rb") as handle:
            shutil.copyfileobj(handle, sink)
