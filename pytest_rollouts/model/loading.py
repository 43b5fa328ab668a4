"""Python objects named ``file.py:name`` by a suite: agent factories, verifiers, tools.

A suite's files are not on ``sys.path`` and two suites may both have a ``verify.py``, so each
file is imported once under a name derived from its path.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


class LoadError(RuntimeError):
    """A named object that cannot be imported; the message names the file."""


def load_module(file: Path) -> ModuleType:
    module_name = "_rollouts_embedded_" + hashlib.sha1(str(file).encode()).hexdigest()[:12]
    module = sys.modules.get(module_name)
    if module is not None:
        return module
    if not file.is_file():
        raise LoadError(f"{file}: no such file")
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    # Registered first, as importlib's recipe does: code run at import (dataclasses resolving
    # string annotations) looks the module up there.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the suite's own code: say which file broke
        sys.modules.pop(module_name, None)
        raise LoadError(f"importing {file} failed: {exc!r}") from exc
    return module


def load_named(reference: str) -> object:
    """The object ``/path/file.py:name`` names (the path is absolute by now)."""
    file, _, name = reference.rpartition(":")
    obj = getattr(load_module(Path(file)), name, None)
    if obj is None:
        raise LoadError(f"{file} has no {name!r}")
    return obj
