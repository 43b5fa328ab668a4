"""Resolve and validate the run's settings once: command line > ini > default.

Every value goes through one pydantic model, so a bad value anywhere (flag or ini)
becomes one readable usage error that names where it came from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .options import OPTIONS, Option


class AgentAddress(BaseModel):
    """One ``--rollouts-agent`` value: an unnamed one sets the default agent."""

    model_config = ConfigDict(frozen=True)

    name: str | None
    url: str

    @classmethod
    def parse(cls, text: str) -> AgentAddress:
        name, sep, rest = text.partition("=")
        if sep and name and not any(c in name for c in ":/"):
            return cls(name=name.strip(), url=_check_url(rest.strip()))
        return cls(name=None, url=_check_url(text.strip()))


def _check_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"agent address {url!r} is not an http(s) URL")
    return url.rstrip("/")


class Settings(BaseModel):
    """What a rollouts run was asked to do; frozen so no hook can drift it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    out: Path | None = None
    agent: tuple[AgentAddress, ...] = ()
    repeats: int = Field(1, ge=1)
    limit: int | None = Field(None, ge=1)
    interleave_repeats: bool = False
    repeats_add_seed: bool = False
    responses_create_params: dict[str, Any] = Field(default_factory=dict)
    parallel: int = Field(64, ge=1)
    max_resident: int | None = Field(None, ge=1)
    timeout: float = Field(3600.0, gt=0)
    retries: int = Field(2, ge=0, le=20)
    retry_backoff: float = Field(1.0, ge=0, le=600)
    resume: bool = False
    resume_recorded: bool = False
    max_attempts: int = Field(3, ge=1)
    retry_terminal_timeouts: bool = False
    longest_first: bool = False
    count_as_zero: frozenset[str] = frozenset()
    count_missing_as_zero: bool = False
    require_complete: bool = False
    fail_under: float | None = None
    no_aggregate: bool = False
    shard: tuple[int, int] | None = None
    dispatch_budget: float | None = Field(None, gt=0)
    drain_margin: float | None = Field(None, ge=0)

    @field_validator("shard", mode="before")
    @classmethod
    def _parse_shard(cls, value: Any) -> Any:
        if isinstance(value, str):
            k, sep, n = value.partition("/")
            if not sep or not k.strip().isdigit() or not n.strip().isdigit():
                raise ValueError("must look like K/N, e.g. 0/4")
            value = (int(k), int(n))
        if isinstance(value, tuple) and not 0 <= value[0] < value[1]:
            raise ValueError("K/N needs 0 <= K < N")
        return value

    @field_validator("count_as_zero", mode="before")
    @classmethod
    def _split_classes(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return frozenset(part.strip() for item in value for part in str(item).split(",") if part.strip())
        return value

    @field_validator("agent", mode="before")
    @classmethod
    def _parse_agents(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return tuple(AgentAddress.parse(v) if isinstance(v, str) else v for v in value)
        return value

    @field_validator("responses_create_params", mode="before")
    @classmethod
    def _parse_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = orjson.loads(value)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON ({exc})") from None
            if not isinstance(value, dict):
                raise ValueError("must be a JSON object")
        return value

    @property
    def resident_limit(self) -> int:
        return self.max_resident or 8 * self.parallel

    @property
    def default_agent_url(self) -> str | None:
        urls = [a.url for a in self.agent if a.name is None]
        return urls[-1] if urls else None

    @property
    def named_agent_urls(self) -> dict[str, str]:
        return {a.name: a.url for a in self.agent if a.name is not None}


def resolve_settings(config: pytest.Config) -> Settings:
    """Build the settings from ``config``, or raise ``pytest.UsageError`` (exit 4)."""
    raw: dict[str, Any] = {}
    source: dict[str, str] = {}
    for option in OPTIONS:
        value, where = _raw_value(config, option)
        if value is not None:
            raw[option.name] = value
            source[option.name] = where
    try:
        settings = Settings.model_validate(raw)
    except ValidationError as exc:
        raise pytest.UsageError(_describe(exc, source)) from None
    if settings.out is None:
        settings = settings.model_copy(update={"out": config.rootpath / "results" / "rollouts.jsonl"})
    elif not settings.out.is_absolute():
        base = config.invocation_params.dir if "out" in source and source["out"].startswith("--") else config.rootpath
        settings = settings.model_copy(update={"out": base / settings.out})
    return settings


def _raw_value(config: pytest.Config, option: Option) -> tuple[Any, str]:
    value = config.getoption("rollouts_" + option.name)
    if value not in (None, []):
        return value, option.cli
    if option.env and os.environ.get(option.env):
        return os.environ[option.env], f"env {option.env}"
    value = config.getini(option.ini)
    if value in (None, "", []):
        return None, ""
    return value, f"ini {option.ini}"


def _describe(exc: ValidationError, source: dict[str, str]) -> str:
    lines = ["invalid rollouts settings:"]
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        where = source.get(field, field)
        given = error.get("input")
        lines.append(f"  {where}: {error['msg']} (got {given!r})")
    return "\n".join(lines)
