"""Prompt templates (NeMo Gym's ``prompt_config``): a YAML file that builds each row's request.

A dataset prepared once can be run under several prompts (a sweep) without being prepared
again: the rows keep only their fields, and the template turns them into
``responses_create_params.input`` when the run is materialized. NeMo Gym's file has ``user``
(required) and ``system``; ``few_shot`` adds example messages between the two. Placeholders are
``{field}`` from the row's top-level fields, literal braces doubled (``{{``), as NeMo Gym
fills them (``str.format_map``). A row that already carries ``responses_create_params.input``
is refused, as NeMo Gym refuses it: the two would silently disagree.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from pytest_rollouts.datatype import datatype
from pytest_rollouts.rows.schema import CREATE_PARAMS


class PromptError(ValueError):
    """A template that cannot be read, or a row it cannot fill; the message says which and why."""


# Both models are built when a template is first read (``defer_build``): every run imports this
# module, few have a template.
class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    role: Literal["system", "developer", "user", "assistant"]
    content: str


class _TemplateFile(BaseModel):
    """The file's schema: NeMo Gym's ``PromptConfig`` (``user``, ``system``) and ``few_shot``."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    user: str
    system: str | None = None
    few_shot: tuple[_Message, ...] = ()


@datatype
class PromptTemplate:
    """A loaded template; ``sha256`` fingerprints what it says (not its comments or layout), for
    the manifest that resume checks."""

    path: Path
    user: str
    system: str | None
    few_shot: tuple[dict[str, str], ...]
    sha256: str

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        """The request's ``input``: the system message, the few-shot messages as written, the user's.

        ``PromptError`` names the placeholder a row lacks, and the fields it has."""
        try:
            system = None if self.system is None else self.system.format_map(row)
            user = self.user.format_map(row)
        except KeyError as exc:
            fields = ", ".join(sorted(map(str, row))) or "none"
            raise PromptError(
                f"the prompt template {self.path} uses {{{exc.args[0]}}}, which the row lacks (its fields: {fields})"
            ) from None
        except (IndexError, ValueError, AttributeError) as exc:  # "{0}", a lone "{", "{a.b}"
            raise PromptError(f"the prompt template {self.path} cannot be filled from the row: {exc}") from None
        head = [] if system is None else [{"role": "system", "content": system}]
        return [*head, *map(dict, self.few_shot), {"role": "user", "content": user}]

    def apply(self, row: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``row`` whose ``responses_create_params.input`` the template built; its other
        request fields (tools, temperature, ...) are kept. ``PromptError`` for a row that has an
        ``input`` of its own, or lacks a placeholder's field."""
        params = row.get(CREATE_PARAMS)
        if isinstance(params, dict) and params.get("input"):
            raise PromptError(
                f"the row has {CREATE_PARAMS}.input and the run has a prompt template ({self.path}): "
                "they exclude each other; drop one"
            )
        built = dict(params) if isinstance(params, dict) else {}
        built["input"] = self.messages(row)
        return {**row, CREATE_PARAMS: built}


def load_template(path: Path) -> PromptTemplate:
    """Read a template file; ``PromptError`` names the file and what is wrong with it."""
    import yaml  # here: every run imports this module, few have a template to read

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PromptError(f"cannot read the prompt template {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise PromptError(f"the prompt template {path} is not UTF-8 text: {exc}") from None
    except yaml.YAMLError as exc:
        raise PromptError(f"the prompt template {path} is not valid YAML: {exc}") from None
    try:
        parsed = _TemplateFile.model_validate(data)
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the file'}: {e['msg']}" for e in exc.errors())
        raise PromptError(f"the prompt template {path}: {where} (keys: user, system, few_shot)") from None
    for text in filter(None, (parsed.system, parsed.user)):
        _refuse_attributes(path, text)
    few_shot = tuple(message.model_dump() for message in parsed.few_shot)
    said = {"system": parsed.system, "few_shot": few_shot, "user": parsed.user}
    digest = hashlib.sha256(json.dumps(said, sort_keys=True).encode()).hexdigest()
    return PromptTemplate(path, parsed.user, parsed.system, few_shot, digest)


def _refuse_attributes(path: Path, text: str) -> None:
    """A placeholder reading an attribute (``{question.upper}``) fills in a Python object's repr
    (``<built-in method upper ...>``), never a row's field: refused when the file is read. Indexing
    (``{meta[level]}``) reads a nested field and is kept."""
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(text) if field]
    except ValueError:
        return  # a lone brace: said, with the row, when the template is filled
    for field in fields:
        if "." in re.sub(r"\[[^\]]*\]", "", field):  # a dot outside an index reads an attribute
            raise PromptError(
                f"the prompt template {path} uses {{{field}}}: a placeholder names a row field ({{field}}, or "
                "{field[key]} inside it), not an attribute"
            )
