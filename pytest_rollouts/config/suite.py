"""Suite declarations: a ``rollouts.toml`` that says which files are datasets and who serves them.

A declaration is what lets ``pytest evalsuites/`` pick up datasets without any flag,
while ``.jsonl`` files anywhere else in a test tree stay invisible.
"""

from __future__ import annotations

import difflib
import fnmatch
import tomllib
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pytest_rollouts.config import SuiteError
from pytest_rollouts.config.values import check_url
from pytest_rollouts.model.spec import DEFAULT_MAX_TURNS


class AgentDeclaration(BaseModel):
    """An agent a suite can route to: a URL, an aiohttp app the plugin starts itself, or a model
    agent (recognised by its ``verifier``): the built-in agent, calling an OpenAI-compatible model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = None
    embedded: str | None = None
    # A model agent's keys (docs/model-agents.md).
    verifier: str | None = None
    model: str | None = None
    model_embedded: str | None = None
    model_name: str | None = None
    api: Literal["chat", "responses"] = "chat"
    api_key_env: str | None = None
    tools: str | None = None
    max_turns: int = Field(DEFAULT_MAX_TURNS, ge=1, le=1000)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        """As ``--rollouts-agent`` checks it: another scheme would fail only at run time, after retries."""
        return None if url is None else check_url(url)

    @model_validator(mode="after")
    def _exactly_one(self) -> AgentDeclaration:
        if self.verifier is not None:
            if self.url is not None or self.embedded is not None:
                raise ValueError(
                    "a model agent (one with 'verifier') takes 'model' or 'model_embedded', not 'url' or 'embedded'"
                )
            if (self.model is None) == (self.model_embedded is None):
                raise ValueError("a model agent takes exactly one of 'model' or 'model_embedded'")
            return self
        given = sorted(key for key in self.model_fields_set if key in MODEL_ONLY)
        if given:
            raise ValueError(f"{', '.join(map(repr, given))} belong to a model agent, which needs 'verifier'")
        if (self.url is None) == (self.embedded is None):
            raise ValueError("give exactly one of 'url' or 'embedded' (or 'verifier' and 'model' for a model agent)")
        return self


# The keys only a model agent has: given without ``verifier``, the declaration is a mistake.
MODEL_ONLY = frozenset({"model", "model_embedded", "model_name", "api", "api_key_env", "tools", "max_turns"})


# NeMo Gym's dataset types: the three a run can ask for (``--rollouts-split``), and ``example``,
# committed smoke-test samples that are declared but never run as a split.
Split = Literal["train", "validation", "benchmark", "example"]


class SuiteConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Datasets of no particular split; ``[splits]`` declares the others.
    datasets: tuple[str, ...] = ()
    splits: dict[Split, tuple[str, ...]] = {}
    # A template (``prompt_config``, relative to this file) that builds every row's request input.
    prompt_config: str | None = None
    agent: str | None = None
    agents: dict[str, AgentDeclaration] = {}
    # Rows that carry ``task_source`` instead of ``agent_ref`` run on the agent named here.
    task_sources: dict[str, str] = {}
    # Episode rows (``task_id.taskset`` + ``task_input``) go to the environment server named here.
    tasksets: dict[str, str] = {}
    # Row fields whose values ``-k`` matches (``keywords = ["difficulty", "task_id"]``: ``-k hard``).
    keywords: tuple[str, ...] = ()
    # NeMo Gym's ``retry_invalid_judge_responses`` for the runs that collect this suite (docs/resume.md).
    retry_invalid_judge_responses: bool | None = None

    @field_validator("datasets", mode="before")
    @classmethod
    def _a_list(cls, value: Any) -> Any:
        """A single pattern written as a string would otherwise get pydantic's 'valid tuple' message."""
        if isinstance(value, str):
            raise ValueError(f"must be a list of glob patterns, e.g. datasets = [{value!r}]")
        if isinstance(value, list | tuple) and not value:  # a suite of nothing: exit 5, naming no file
            raise ValueError("lists no pattern: name the suite's dataset files, e.g. datasets = ['*.jsonl']")
        return value

    @field_validator("splits", mode="before")
    @classmethod
    def _lists_of_patterns(cls, value: Any) -> Any:
        """A split's patterns as ``datasets`` takes them: a string alone is a mistake."""
        if isinstance(value, dict):
            for split, patterns in value.items():
                if isinstance(patterns, str):
                    raise ValueError(f"{split} must be a list of glob patterns, e.g. {split} = [{patterns!r}]")
        return value

    @model_validator(mode="after")
    def _default_is_declared(self) -> SuiteConfig:
        if self.agent is not None and self.agent not in self.agents:
            raise ValueError(f"default agent {self.agent!r} is not declared under [agents]")
        if not self.datasets and not any(self.splits.values()):
            raise ValueError("declares no dataset: give datasets = ['*.jsonl'] or a [splits] table")
        return self


class Suite:
    """A parsed declaration together with the directory it governs."""

    def __init__(self, root: Path, config: SuiteConfig) -> None:
        self.root = root
        self.config = config

    @property
    def path(self) -> Path:
        return self.root / "rollouts.toml"

    def declares(self, file_path: Path) -> bool:
        return any(self._matches(file_path, patterns) for patterns in self._patterns().values())

    def split_of(self, file_path: Path) -> str | None:
        """The split ``[splits]`` puts the file in, or None; ``SuiteError`` when two splits name it:
        taking either would run a benchmark file in training, or drop it from the benchmark."""
        found = [split for split, patterns in self.config.splits.items() if self._matches(file_path, patterns)]
        if len(found) > 1:
            relative = file_path.relative_to(self.root).as_posix()
            raise SuiteError(
                f"{self.path}:{self.line_of(found[1])}: {relative} is declared in the {' and the '.join(found)} "
                "splits; a dataset belongs to one: narrow the patterns"
            )
        return found[0] if found else None

    def selects(self, file_path: Path, asked: str | None) -> bool:
        """Whether collecting the suite's directory runs this dataset: those of the ``asked`` split;
        without one, the benchmark split where the suite declares one, else every dataset. An
        ``example`` dataset runs only when named on its own."""
        if not self.config.splits:
            return self.declares(file_path)
        split = self.split_of(file_path)
        if asked is not None:
            return split == asked
        if "benchmark" in self.config.splits:
            return split == "benchmark"
        return split != "example" and self.declares(file_path)

    def prompt_config(self) -> Path | None:
        """The suite's prompt template, resolved against its directory."""
        given = self.config.prompt_config
        return None if given is None else self.root / given

    def line_of(self, key: str) -> int:
        """The line of ``rollouts.toml`` that declares ``key`` (1 when none stands out), for messages."""
        for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if line.split("=", 1)[0].strip().strip("\"'") == key:
                return number
        return 1

    def _patterns(self) -> dict[str | None, tuple[str, ...]]:
        return {None: self.config.datasets, **self.config.splits}

    def _matches(self, file_path: Path, patterns: tuple[str, ...]) -> bool:
        relative = file_path.relative_to(self.root).as_posix()
        return any(fnmatch.fnmatchcase(relative, pattern) for pattern in patterns)

    def unmatched(self) -> list[str]:
        """Dataset patterns that match no file: a typo in a name would quietly shrink the eval."""
        files = [p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file()]
        patterns = [p for listed in self._patterns().values() for p in listed]
        return [p for p in patterns if not any(fnmatch.fnmatchcase(f, p) for f in files)]


@cache
def load_suite(path: Path) -> Suite:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return Suite(path.parent, SuiteConfig.model_validate(data))
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: not valid TOML: {exc}") from None
    except ValidationError as exc:
        raise SuiteError(f"{path}: {'; '.join(map(_in_words, exc.errors()))}") from None


# pydantic's words for a value of the wrong type, as a TOML file's author reads them.
TYPE_WORDS = {
    "string_type": "must be a string",
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "missing": "is missing",
    "int_type": "must be an integer",
}


def _in_words(error: Any) -> str:
    """One of pydantic's errors in the file's terms, after its dotted key: an unknown key with the
    nearest known one (``agnet`` read ``Extra inputs are not permitted``), a wrong type plainly."""
    loc = [str(part) for part in error["loc"]]
    where = ".".join(loc) or "the file"
    if error["type"] == "extra_forbidden":
        known = AgentDeclaration.model_fields if loc[:1] == ["agents"] else SuiteConfig.model_fields
        meant = difflib.get_close_matches(loc[-1], list(known), n=1)
        return f"{where}: unknown key" + (f", did you mean {meant[0]!r}?" if meant else "")
    return f"{where}: {TYPE_WORDS.get(error['type'], error['msg'].removeprefix('Value error, '))}"
