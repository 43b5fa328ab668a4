"""``datatype``: the project's dataclass, its ``__repr__`` and ``__eq__`` shared instead of written per class.

On CPython 3.11 ``dataclasses.dataclass`` writes each generated method out as source and compiles it
with its own ``exec``, at every start, for every class: ``__init__``, ``__repr__``, ``__eq__`` and,
frozen, ``__setattr__``, ``__delattr__`` and ``__hash__``. A one-row pytest run imports about seventy
of the project's dataclasses, so their ``__repr__`` and ``__eq__`` were a measurable part of its
start (``docs/performance.md``, the sixth pass). Here those two, and a frozen class's ``__hash__``, are one
function each for every class, reading the fields the class lists: what they compare, show and hash,
and in which order, is the generated methods' (``field(repr=, compare=, hash=)`` included, and
which of them a class keeps when it defines its own), so instances behave as dataclasses' do (a
frozen one with the setters dataclasses generate; ``fields``, ``replace``, ``asdict``, pickle and
orjson see a dataclass). Two things tell them apart: ``__dataclass_params__`` says ``repr`` and
``eq`` False, and the names ``_datatype_shown``, ``_datatype_compared`` and ``_datatype_hashed`` are
the class's own. ``__init__`` stays generated: instances are made on hot paths, where a generic one
would cost every call.

ruff bans ``dataclasses.dataclass`` in the package (``pyproject.toml``), so new classes use this.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T", bound=type)


@overload
def datatype(cls: T, /) -> T: ...
@overload
def datatype(*, frozen: bool = False, slots: bool = False, eq: bool = True) -> Callable[[T], T]: ...
@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def datatype(cls: T | None = None, /, *, frozen: bool = False, slots: bool = False, eq: bool = True) -> Any:
    """``dataclasses.dataclass(cls, frozen=, slots=, eq=)``, its ``__repr__``, ``__eq__`` and ``__hash__``
    the shared ones below. A method the class defines itself is kept, as ``dataclass`` keeps it."""

    def wrap(cls: T) -> T:
        own = cls.__dict__
        # dataclass's rule: a ``__hash__`` of None that defining ``__eq__`` set is not the class's own.
        own_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
        made: Any = dataclasses.dataclass(cls, repr=False, eq=False, frozen=frozen, slots=slots)  # noqa: TID251
        fields = dataclasses.fields(made)
        if "__repr__" not in own:
            made._datatype_shown = tuple(f.name for f in fields if f.repr)
            made.__repr__ = _repr
        if not eq:
            return made  # type: ignore[no-any-return]
        if "__eq__" not in own:
            made._datatype_compared = _getter([f.name for f in fields if f.compare])
            made.__eq__ = _eq
        if not own_hash:  # equal by value: hashable by the same values if frozen, else not at all
            if frozen:
                made._datatype_hashed = _getter([f.name for f in fields if (f.compare if f.hash is None else f.hash)])
            made.__hash__ = _hash if frozen else None
        return made  # type: ignore[no-any-return]

    return wrap if cls is None else wrap(cls)


def tuple_getter(make: Callable[..., Callable[[Any], Any]], names: Sequence[str]) -> Callable[[Any], tuple[Any, ...]]:
    """``names``' values (attributes or keys, as ``make`` gets them) as a tuple, in one C call: even
    for one name, or none, where ``attrgetter`` and ``itemgetter`` would give a bare value."""
    if len(names) > 1:
        return make(*names)
    if names:
        one = make(names[0])
        return lambda source: (one(source),)
    return lambda source: ()


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._datatype_shown)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: object) -> bool:
    if other.__class__ is self.__class__:
        compared = self._datatype_compared
        return compared(self) == compared(other)  # type: ignore[no-any-return]
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self._datatype_hashed(self))


def _getter(names: Sequence[str]) -> staticmethod[[Any], tuple[Any, ...]]:
    """A class attribute getting ``names``' values, a staticmethod: a getter of one field or none is a
    function, which an instance would bind."""
    return staticmethod(tuple_getter(operator.attrgetter, names))
