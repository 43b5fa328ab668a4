"""What a dataset file is declared as: its split and its prompt template.

A suite's ``rollouts.toml`` says it (``[splits]``, ``prompt_config``), and so does a NeMo Gym
head server's config (a dataset entry's ``type`` and ``prompt_config``), and the run's
``--rollouts-prompt-config`` overrides both templates, as NeMo Gym's ``+prompt_config=`` does.
Decided once per file, before any row is read, for collection (which files a split runs), the
scan (each row filled, file and line for one that cannot be) and the manifest (the split and the
template's hash, which a resume checks).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_rollouts.config import SuiteError, find_declaration
from pytest_rollouts.config.agents import Agents
from pytest_rollouts.config.settings import Settings
from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.prompts import PromptError, PromptTemplate, load_template

if TYPE_CHECKING:
    from pytest_rollouts.config.suite import Suite


class DeclarationError(ValueError):
    """A declaration no run can use (a template that cannot be read); the message says where."""


@datatype
class Declared:
    """A dataset's split (None: undeclared) and where that was said, and its template, if any."""

    split: str | None
    where: str
    prompt: PromptTemplate | None


class Declarations:
    """Every dataset file's declaration in one run, each file's read once."""

    def __init__(self, settings: Settings, agents: Agents, root: Path) -> None:
        self._settings = settings
        self._agents = agents
        self._root = root
        self._known: dict[Path, Declared] = {}
        # Paths as callers give them: resolving one (a few stat calls) is worth doing once per file.
        self._given: dict[Path, Declared] = {}
        self._templates: dict[Path, PromptTemplate] = {}

    def of(self, dataset: Path) -> Declared:
        """``dataset``'s declaration; ``DeclarationError`` for a template that cannot be read."""
        if dataset in self._given:
            return self._given[dataset]
        path = dataset.resolve()
        if path not in self._known:
            self._known[path] = self._declare(path)
        self._given[dataset] = self._known[path]
        return self._known[path]

    def head_selects(self, dataset: Path) -> bool:
        """Whether the head server's config lists ``dataset`` in the run's split (its asked one, else
        benchmark): how ``pytest --rollouts-head-server`` finds a NeMo Gym config's datasets."""
        entry = self._head_entry(dataset.resolve())
        return entry is not None and entry[0] == (self._settings.split or "benchmark")

    def head_missing(self, under: list[Path]) -> list[str]:
        """The head server's datasets in the run's split that lie under ``under`` (the directories a
        run collects) but are not on disk: collecting them would shrink the eval without a word."""
        if self._settings.head_server is None:
            return []
        _ = self._agents.registry
        discovered = self._agents.discovered
        split = self._settings.split or "benchmark"
        missing = []
        for entry in discovered.datasets if discovered is not None else ():
            path = (self._root / entry.jsonl_fpath).resolve()
            if entry.split == split and not path.exists() and any(path.is_relative_to(d) for d in under):
                missing.append(f"{entry.name!r} ({self._shown(path)})")
        return missing

    def _declare(self, path: Path) -> Declared:
        suite = self._suite(path)
        split, where, prompt = None, "", None
        if suite is not None and suite.declares(path):
            try:
                split = suite.split_of(path)
            except SuiteError as exc:
                raise DeclarationError(str(exc)) from None
            where = f"{self._shown(suite.path)}:{suite.line_of(split or 'datasets')}"
            prompt = suite.prompt_config()
        elif (entry := self._head_entry(path)) is not None:
            split, name, given = entry
            where = f"the head server's dataset {name!r}"
            prompt = None if given is None else self._root / given
        if self._settings.prompt_config is not None:
            prompt = self._settings.prompt_config
        return Declared(split, where, None if prompt is None else self._template(prompt))

    def _suite(self, path: Path) -> Suite | None:
        declaration = find_declaration(path.parent, self._root.resolve())
        if declaration is None:
            return None
        from pytest_rollouts.config.suite import load_suite  # its models, only for a declaration

        try:
            return load_suite(declaration)
        except SuiteError as exc:
            raise DeclarationError(str(exc)) from None

    def _head_entry(self, path: Path) -> tuple[str | None, str, str | None] | None:
        """The head server's entry for ``path``: its type, name and template; None when it lists none."""
        if self._settings.head_server is None:
            return None
        _ = self._agents.registry  # the head server is asked once, here or by routing
        discovered = self._agents.discovered
        found = [
            entry
            for entry in (discovered.datasets if discovered is not None else ())
            if (self._root / entry.jsonl_fpath).resolve() == path
        ]
        if len({entry.split for entry in found}) > 1:
            said = " and ".join(f"{entry.split} (dataset {entry.name!r})" for entry in found)
            raise DeclarationError(
                f"the head server's config lists {self._shown(path)} as {said}; a dataset belongs to one split"
            )
        if len({entry.prompt_config for entry in found}) > 1:
            said = " and ".join(f"{entry.prompt_config or 'none'} (dataset {entry.name!r})" for entry in found)
            raise DeclarationError(
                f"the head server's config gives {self._shown(path)} two prompt templates, {said}: one builds its rows"
            )
        return (found[0].split, found[0].name, found[0].prompt_config) if found else None

    def _template(self, given: Path) -> PromptTemplate:
        """The template at ``given``, read once, named in messages relative to the run's root."""
        path = given.resolve()
        if path not in self._templates:
            try:
                self._templates[path] = load_template(Path(self._shown(path)) if given.is_absolute() else given)
            except PromptError as exc:
                raise DeclarationError(str(exc)) from None
        return self._templates[path]

    def _shown(self, path: Path) -> str:
        return os.path.relpath(path, self._root)
