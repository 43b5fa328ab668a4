"""Resolve and validate the run's settings once: command line > environment > ini > default.

Every value goes through one pydantic model, so a bad value anywhere (flag, variable or ini)
becomes one readable usage error that names where it came from. The model's fields are the
option table's (``options.py``): their defaults and descriptions come from there, their types
and bounds are here. The Python API takes the same model, plus its datasets, as ``CollectionConfig``
(``collection.py``).

Its annotations are evaluated as the class is made (no ``from __future__ import annotations``):
pydantic would compile each of the model's sixty on its own, every run, as it built the model.
"""

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    PrivateAttr,
    ValidatorFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_validator,
)

from pytest_rollouts.config import bounds
from pytest_rollouts.config.agent_values import (
    AgentAddress,
    AgentHeader,
    Url,
    each_parsed,
    once_per_key,
    parse_agent_headers,
)
from pytest_rollouts.config.bounds import AdaptiveParallel
from pytest_rollouts.config.dataset_values import MaterializedPath, Split, TemplatePath
from pytest_rollouts.config.fields import (
    MaxFailures,
    agent_map_value,
    comma_separated,
    fan_out_value,
    json_object,
    need_gate,
    option_field,
    repeats_value,
    utf8_given,
)
from pytest_rollouts.config.output_fields import CacheFolder, MlflowExperiment, ReportPath, WandbProject
from pytest_rollouts.config.output_values import materialized_clash, report_clash, run_file_clash
from pytest_rollouts.config.statistics_values import PassKs, RewardRangeValue
from pytest_rollouts.config.values import check_recorded_path, check_url
from pytest_rollouts.net.address import without_password
from pytest_rollouts.options import OPTION

if TYPE_CHECKING:
    from pytest_rollouts.store.artifacts import ArtifactPaths

DEFAULT_KEY = "_default"
# The settings that are URLs, which may hold a password (``Url``).
URL_FIELDS = frozenset({"model", "head_server"})


class Settings(BaseModel):
    """What a rollouts run was asked to do; frozen so no hook can drift it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    out: Path | None = option_field("out")
    # ``agents={"name": url}`` is the Python API's spelling of ``--rollouts-agent name=url``.
    agent: tuple[AgentAddress, ...] = option_field("agent", validation_alias=AliasChoices("agent", "agents"))
    repeats: int | dict[str, int] = option_field("repeats")
    agent_map: dict[str, str] = option_field("agent_map")
    fan_out: dict[str, tuple[str, ...]] = option_field("fan_out")
    agent_header: tuple[AgentHeader, ...] = option_field("agent_header")
    head_server: Url | None = option_field("head_server")
    no_health_check: bool = option_field("no_health_check")
    health_ignore: frozenset[str] = option_field("health_ignore")
    health_workers: int = option_field("health_workers", ge=1, le=256)
    limit: int | None = option_field("limit", ge=1, le=bounds.MAX_ROWS)
    interleave_repeats: bool = option_field("interleave_repeats")
    repeats_add_seed: bool = option_field("repeats_add_seed")
    responses_create_params: dict[str, Any] = option_field("responses_create_params")
    parallel: int = option_field("parallel", ge=1, le=bounds.MAX_PARALLEL)
    max_resident: int | None = option_field("max_resident", ge=1, le=bounds.MAX_RESIDENT)
    timeout: float = option_field("timeout", ge=bounds.MIN_SECONDS, le=bounds.MAX_SECONDS, allow_inf_nan=False)
    model: Url | None = option_field("model")
    model_name: str | None = option_field("model_name", min_length=1)
    model_parallel: int | None = option_field("model_parallel", ge=1, le=bounds.MAX_PARALLEL)
    model_timeout: float = option_field(
        "model_timeout", ge=bounds.MIN_SECONDS, le=bounds.MAX_SECONDS, allow_inf_nan=False
    )
    retries: int = option_field("retries", ge=0, le=20)
    retry_backoff: float = option_field("retry_backoff", ge=0, le=600, allow_inf_nan=False)
    retry_budget: float = option_field("retry_budget", ge=0, le=1000, allow_inf_nan=False)
    # The dispatcher's heartbeat: well under the 120 s of silence after which pytest calls it stuck.
    progress_interval: float = option_field("progress_interval", ge=0.05, le=60, allow_inf_nan=False)
    cache: CacheFolder = option_field("cache")
    status_interval: float = option_field("status_interval", ge=0.05, le=3600, allow_inf_nan=False)
    resume: bool = option_field("resume")
    overwrite: bool = option_field("overwrite")
    resume_recorded: bool = option_field("resume_recorded")
    max_attempts: int = option_field("max_attempts", ge=1, le=bounds.MAX_ATTEMPTS)
    retry_terminal_timeouts: bool = option_field("retry_terminal_timeouts")
    longest_first: bool = option_field("longest_first")
    count_as_zero: frozenset[str] = option_field("count_as_zero")
    count_missing_as_zero: bool = option_field("count_missing_as_zero")
    require_complete: bool = option_field("require_complete")
    # nan would compare false with every mean: a gate silently off.
    fail_under: float | None = option_field("fail_under", allow_inf_nan=False)
    max_failures: MaxFailures = option_field("max_failures")
    no_aggregate: bool = option_field("no_aggregate")
    shard: tuple[int, int] | None = option_field("shard")
    dispatch_budget: float | None = option_field(
        "dispatch_budget", ge=bounds.MIN_SECONDS, le=bounds.MAX_SECONDS, allow_inf_nan=False
    )
    drain_margin: float | None = option_field("drain_margin", ge=0, le=bounds.MAX_SECONDS, allow_inf_nan=False)
    baseline: Path | None = option_field("baseline")
    max_regression: float | None = option_field("max_regression", ge=0, allow_inf_nan=False)
    gate_scored_only: bool = option_field("gate_scored_only")
    correction: Literal["none", "holm", "bh"] = option_field("correction")
    sequential: bool = option_field("sequential")
    reward_range: RewardRangeValue = option_field("reward_range")
    gate_on: Literal["mean", "lower-bound"] = option_field("gate_on")
    pass_k: PassKs = option_field("pass_k")
    group_by: str | None = option_field("group_by")
    html: ReportPath = option_field("html")
    split: Split = option_field("split")
    prompt_config: TemplatePath = option_field("prompt_config")
    materialized: MaterializedPath = option_field("materialized")
    wandb: WandbProject = option_field("wandb")
    mlflow: MlflowExperiment = option_field("mlflow")
    retry_invalid_judge_responses: bool = option_field("retry_invalid_judge_responses")
    environment_routing_mode: Literal["agent", "legacy", "taskset"] = option_field("environment_routing_mode")
    environment_server: str | None = option_field("environment_server", min_length=1)
    # Where each value given came from ("--rollouts-parallel", "env ...", "ini ..."): a message
    # about a value names the place the user set it.
    _sources: dict[str, str] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        """Sources arrive as validation context, so the model's own checks can name them too."""
        if isinstance(context, dict):
            self._sources = context.get("sources", {})

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        """Without a URL's password, as its dumps (``Url``): settings printed or logged must not show it."""
        for name, value in super().__repr_args__():
            yield name, without_password(value) if name in URL_FIELDS and isinstance(value, str) else value

    @property
    def sources(self) -> dict[str, str]:
        """Where each value given came from, by option name."""
        return dict(self._sources)

    def source_of(self, name: str) -> str:
        return self._sources.get(name) or OPTION[name].cli

    @field_validator("out", mode="before")
    @classmethod
    def _parse_out(cls, value: Any) -> Any:
        """A file named ``<stem>.jsonl``: the sidecars are named after it, and a fresh run moves an
        earlier one aside. An empty value would name the directory itself, which would be moved."""
        if isinstance(value, str | Path) and (not str(value).endswith(".jsonl") or Path(value).name == ".jsonl"):
            raise ValueError("must name the output file, <stem>.jsonl")
        check_recorded_path(value)
        if isinstance(value, str | Path) and (
            clash := run_file_clash(Path(value), "a run's output", its_own_output=True)
        ):
            raise ValueError(clash)
        return value

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
        if isinstance(value, tuple) and value[1] > bounds.MAX_SHARDS:
            raise ValueError(f"N must be at most {bounds.MAX_SHARDS}")
        return value

    @field_validator("parallel", mode="wrap")
    @classmethod
    def _parse_parallel(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """``N``, or ``auto:MAX`` (``AdaptiveParallel``): MAX under the same bounds as ``N``."""
        if isinstance(value, AdaptiveParallel):
            return AdaptiveParallel(handler(int(value)))
        if not (isinstance(value, str) and value.strip().lower().startswith("auto:")):
            return handler(value)
        ceiling = value.strip()[len("auto:") :].strip()
        if not ceiling.lstrip("-").isdigit():
            raise ValueError(f"must be N or auto:MAX with MAX a whole number (e.g. 64 or auto:128), got {value!r}")
        return AdaptiveParallel(handler(int(ceiling)))

    @field_serializer("parallel")
    def _dump_parallel(self, value: int) -> int | str:
        """``auto:MAX`` dumps as it was given, so a dumped config runs the same way."""
        return str(value) if isinstance(value, AdaptiveParallel) else value

    @field_validator("repeats", mode="before")
    @classmethod
    def _parse_repeats(cls, value: Any) -> Any:
        return repeats_value(value)

    @field_validator("agent_map", mode="before")
    @classmethod
    def _parse_agent_map(cls, value: Any) -> Any:
        return agent_map_value(value)

    @field_validator("fan_out", mode="before")
    @classmethod
    def _parse_fan_out(cls, value: Any) -> Any:
        return fan_out_value(value)

    @field_validator("agent_header", mode="before")
    @classmethod
    def _parse_headers(cls, value: Any) -> Any:
        if isinstance(value, str):  # from the environment: one header per line
            value = value.splitlines()
        return parse_agent_headers(value) if isinstance(value, (list, tuple)) else value

    @field_validator("model")
    @classmethod
    def _model_url(cls, url: str | None) -> str | None:
        return None if url is None else check_url(url).rstrip("/")

    @field_validator("head_server", mode="before")
    @classmethod
    def _parse_head_server(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip().rstrip("/")
            if not text.startswith(("http://", "https://")):
                text = "http://" + text
            host_port = text.split("://", 1)[1]
            host, _, port = host_port.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError("must look like HOST:PORT, e.g. 127.0.0.1:11000")
            value = text
        return value

    @model_validator(mode="after")
    def _no_conflicts(self) -> "Settings":
        both = sorted(set(self.agent_map) & set(self.fan_out))
        if both:
            raise ValueError(
                f"{', '.join(both)} is both mapped ({self.source_of('agent_map')}) and fanned out "
                f"({self.source_of('fan_out')}); give one of them"
            )
        if materialized_clash(self.materialized, self.out):
            raise ValueError(
                f"{self.source_of('materialized')} names one of the run's other files ({self.materialized}); "
                "name a file of its own"
            )
        unpaired = self.unpaired_environment_server()
        if unpaired and (self.head_server is None or "environment_routing_mode" in self.model_fields_set):
            raise ValueError(unpaired)
        if self.resume and self.overwrite:
            raise ValueError(
                f"{self.source_of('resume')} continues the earlier results and {self.source_of('overwrite')} "
                "deletes them; give one of them"
            )
        if self.no_aggregate and self.fail_under is not None:
            # Without metrics there is no mean reward, so the gate could only ever fail (exit 7).
            skip = self.source_of("no_aggregate")
            raise ValueError(
                f"{self.source_of('fail_under')} needs the metrics that {skip} skips: gate the merge instead "
                f"(pytest-rollouts aggregate ... --fail-under X) or drop {skip}"
            )
        clash = report_clash(self.html, {"this run": self.paths if self.out else None, "the baseline": self.baseline})
        if clash:
            raise ValueError(f"{self.source_of('html')}: {clash}")
        return self

    def _comparison_options(self) -> list[tuple[str, bool]]:
        """The options that only a comparison with a baseline uses, and whether each was asked."""
        return [
            ("max_regression", self.max_regression is not None),
            ("correction", self.correction != "none"),
            ("sequential", self.sequential),
        ]

    @model_validator(mode="after")
    def _regression_needs_baseline(self) -> "Settings":
        same = self.baseline is not None and self.out is not None and self.baseline.resolve() == self.out.resolve()
        if same:  # the run moves the earlier results at --rollouts-out aside: it would compare with itself
            raise ValueError(f"{self.source_of('baseline')} is this run's own output; name the earlier run's file")
        asked = [name for name, on in self._comparison_options() if on]
        if asked and self.baseline is None:
            gate, baseline = self.source_of(asked[0]), self.source_of("baseline")
            raise ValueError(f"{gate} compares with a baseline run: give {baseline} PATH")
        need_gate(
            self.gate_scored_only,
            self.max_regression,
            self.source_of("gate_scored_only"),
            self.source_of("max_regression"),
        )
        if self.baseline is not None:  # before a run that would end refusing it
            from pytest_rollouts.store.artifacts import ArtifactPaths

            missing = [p for p in (self.baseline, ArtifactPaths(self.baseline).materialized) if not p.is_file()]
            if missing:
                raise ValueError(
                    f"{self.source_of('baseline')}: {missing[0]} is not there; name an earlier run's output"
                )
        if self.no_aggregate:
            # They read or write the metrics, which there are none of: they would do nothing, unsaid.
            given = [self.source_of(name) for name in ("baseline", "pass_k", "group_by") if getattr(self, name)]
            given += [self.source_of("gate_on")] if self.gate_on != "mean" else []
            if given:
                raise ValueError(f"{', '.join(given)} need the metrics that {self.source_of('no_aggregate')} skips")
        return self

    @property
    def fewest_repeats(self) -> int:
        """The smallest per-row rollout count, which sizes xdist's queues (never too shallow)."""
        if isinstance(self.repeats, int):
            return self.repeats
        unlisted = () if DEFAULT_KEY in self.repeats else (1,)
        return min((*self.repeats.values(), *unlisted))

    def unpaired_environment_server(self) -> str:
        """Why legacy routing and its server are not given together, or "". A server given alone
        waits, with a head server whose config may set the mode, for ``Agents.registry``'s check."""
        if (self.environment_routing_mode == "legacy") == (self.environment_server is not None):
            return ""
        return (
            f"{self.source_of('environment_routing_mode')} legacy sends every flat row to the server "
            f"{self.source_of('environment_server')} names: give both, or neither"
        )

    def repeats_for(self, *names: str) -> int:
        """The count of the first of ``names`` (an agent, then the environment server its rows go
        through) that the run gives one, else ``_default``'s."""
        if isinstance(self.repeats, int):
            return self.repeats
        return next((self.repeats[name] for name in names if name in self.repeats), self.repeats.get(DEFAULT_KEY, 1))

    @field_validator("count_as_zero", "health_ignore", mode="before")
    @classmethod
    def _split_classes(cls, value: Any) -> Any:
        return comma_separated(value) if isinstance(value, (list, tuple)) else value

    @field_validator("agent", mode="before")
    @classmethod
    def _parse_agents(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            value = [f"{name}={url}" for name, url in value.items()]
        return each_parsed(value, AgentAddress.parse)

    _once_per_key = field_validator("agent", "agent_header")(once_per_key)

    @field_validator("responses_create_params", mode="before")
    @classmethod
    def _parse_json(cls, value: Any) -> Any:
        return json_object(value) if isinstance(value, str) else value

    # Every name and path given is text, checked before any field reads it (``fields.utf8_given``).
    _text = model_validator(mode="before")(classmethod(utf8_given))

    @property
    def paths(self) -> "ArtifactPaths":
        """The run's files: named after ``out``, the materialized inputs where asked."""
        from pytest_rollouts.store.artifacts import ArtifactPaths

        assert self.out is not None
        return ArtifactPaths(self.out, self.materialized)

    @property
    def resident_limit(self) -> int:
        return self.max_resident or 8 * self.parallel

    @property
    def default_agent_url(self) -> str | None:
        return next((a.url for a in self.agent if a.name is None), None)

    @property
    def named_agent_urls(self) -> dict[str, str]:
        return {a.name: a.url for a in self.agent if a.name is not None}

    @property
    def fallback_agent(self) -> str | None:
        """Of rows naming no agent where nothing else decides: none here (the API's one, ``CollectionConfig``)."""
        return None

    @property
    def agent_hint(self) -> str:
        """How a run is given a default agent, in its front door's words."""
        return "--rollouts-agent URL"
