"""``datatype``: the project's dataclass, its methods shared, or compiled only for a class that needs one.

On CPython 3.11 ``dataclasses.dataclass`` writes each generated method out as source and compiles it
with its own ``exec``, at every start, for every class: ``__init__``, ``__repr__``, ``__eq__`` and,
frozen, ``__setattr__``, ``__delattr__`` and ``__hash__``. A one-row pytest run imports about seventy
of the project's dataclasses, and those compiles were a measurable part of its start
(``docs/performance.md``, the sixth and seventh passes).

- ``__repr__`` and ``__eq__``, and a frozen class's ``__hash__``, are one function each for every
  class, reading the fields the class lists: what they compare, show and hash, and in which order,
  is the generated methods' (``field(repr=, compare=, hash=)`` included, and which of them a class
  keeps when it defines its own).
- ``__init__`` is compiled once a class has made ``GENERIC_INSTANCES`` instances. Most classes make
  one or a few per run (its settings, its score, its plan) or none: those are made by one generic
  function, which binds the arguments in Python as the generated ``__init__`` would. A class made
  per row or per message gets the generated ``__init__`` it had before, after as many generic calls
  as cost about one compile. Any call the generic one does not take as it is (a missing or unknown
  argument) goes to the compiled one, so errors read as Python's own.

Instances behave as dataclasses' do (a frozen one with the setters dataclasses generate;
``fields``, ``replace``, ``asdict``, pickle and orjson see a dataclass). What tells them apart:
``__dataclass_params__`` says ``repr`` and ``eq`` False, the names ``_datatype_shown``,
``_datatype_compared`` and ``_datatype_hashed`` are the class's own, and ``InitVar`` fields are
refused (no class here has one).

ruff bans ``dataclasses.dataclass`` in the package (``pyproject.toml``), so new classes use this.
"""

from __future__ import annotations

import dataclasses
import operator
import re
import reprlib
import sys
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
        made: Any = dataclasses.dataclass(  # noqa: TID251
            cls, init=False, repr=False, eq=False, frozen=frozen, slots=slots
        )
        fields = dataclasses.fields(made)
        _refuse_unsupported(made, [f for f in fields if f.init])
        if "__init__" not in own:
            made.__init__ = _FirstInit(made, fields, frozen=frozen, slots=slots).stand_in()
        made.__dataclass_params__.init = True  # it has the ``__init__`` dataclass would give it
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


# How many instances a class makes with the generic ``__init__`` before its own is compiled: about
# as many as the compile costs in generic calls' extra time (``docs/performance.md``, seventh pass).
GENERIC_INSTANCES = 32


class _FirstInit:
    """A class's ``__init__`` for its first instances: binds the arguments in Python, as the
    generated one would, then hands over to the generated one, compiled once and set on the class."""

    def __init__(self, cls: Any, fields: tuple[dataclasses.Field[Any], ...], *, frozen: bool, slots: bool) -> None:
        self._cls = cls
        self._frozen = frozen
        self._post_init = hasattr(cls, "__post_init__")
        missing = dataclasses.MISSING
        # The fields ``__init__`` sets, in order, each with where a value not given comes from
        # (dataclasses' rule): its factory, its default, or nowhere (a required argument). A field
        # not in the call is set from its factory, or from its default on a slot, which holds no
        # class-level default; otherwise its class attribute is its default and it is not set.
        self._sets: list[tuple[dataclasses.Field[Any], str | None]] = []
        for f in fields:
            fallback = _MADE if f.default_factory is not missing else _DEFAULT if f.default is not missing else None
            if f.init or fallback == _MADE or (slots and fallback == _DEFAULT):
                self._sets.append((f, fallback))
        init = [f for f in fields if f.init]
        self._positional = [f.name for f in init if not f.kw_only]
        self._accepted = frozenset(f.name for f in init)
        self._required = [f.name for f, fallback in self._sets if fallback is None]
        self._generic_left = GENERIC_INSTANCES
        self._compiled: Callable[..., None] | None = None
        self._stand_in: Callable[..., None] | None = None

    def stand_in(self) -> Callable[..., None]:
        first = self

        def __init__(self: Any, /, *args: Any, **kwargs: Any) -> None:  # a field may be named ``self``
            if first._generic_left > 0 and first.bound(self, args, kwargs):
                first._generic_left -= 1
            else:
                first.compiled()(self, *args, **kwargs)

        __init__.__qualname__ = f"{self._cls.__qualname__}.__init__"
        self._stand_in = __init__
        return __init__

    def bound(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Set ``instance``'s fields from the call, as the generated ``__init__`` does, and call
        ``__post_init__``; False, having set nothing, for a call that would raise ``TypeError``."""
        positional = self._positional
        if len(args) > len(positional) or not self._accepted.issuperset(kwargs):
            return False
        values = dict(zip(positional, args, strict=False))  # the positional ones given
        if len(values) + len(kwargs) != len(values | kwargs):  # one given both ways
            return False
        values |= kwargs
        if not values.keys() >= set(self._required):
            return False
        assign = object.__setattr__ if self._frozen else setattr
        for f, fallback in self._sets:
            if f.name in values:
                value = values[f.name]
            else:
                value = f.default_factory() if fallback == _MADE else f.default
            assign(instance, f.name, value)
        if self._post_init:
            instance.__post_init__()
        return True

    def compiled(self) -> Callable[..., None]:
        """The ``__init__`` dataclass generates, compiled now and set on the class from here on."""
        if self._compiled is not None:
            return self._compiled
        # Names the body uses, passed to a factory as dataclasses does: the ``__init__`` made in it
        # has the module's globals (``get_type_hints`` reads its annotations there) and these as cells.
        helpers: dict[str, Any] = {"__datatype_setattr": object.__setattr__, "__datatype_factory": _FACTORY}
        me = "__datatype_self" if "self" in self._accepted else "self"
        params: list[str] = [me]
        keyword_only: list[str] = []
        body: list[str] = []
        for f, fallback in self._sets:
            name = given = value = f.name
            if fallback == _MADE:
                helpers[f"__datatype_make_{name}"] = f.default_factory
                value = f"__datatype_make_{name}()"
                if f.init:
                    value, given = f"{value} if {name} is __datatype_factory else {name}", f"{name}=__datatype_factory"
            elif fallback == _DEFAULT:
                default = f"__datatype_default_{name}"
                helpers[default] = f.default
                value, given = (name, f"{name}={default}") if f.init else (default, "")
            if f.init:
                (keyword_only if f.kw_only else params).append(given)
            if self._frozen:
                body.append(f"__datatype_setattr({me}, {name!r}, {value})")
            else:
                body.append(f"{me}.{name} = {value}")
        if self._post_init:
            body.append(f"{me}.__post_init__()")
        signature = ", ".join(params + (["*", *keyword_only] if keyword_only else []))
        source = (
            f"def __datatype_make_init__({', '.join(helpers)}):\n"
            f" def __init__({signature}):\n" + "".join(f"  {line}\n" for line in body or ["pass"]) + " return __init__"
        )
        module = sys.modules.get(self._cls.__module__)
        made: dict[str, Any] = {}
        exec(source, {} if module is None else module.__dict__, made)  # as dataclasses does, at import
        init: Callable[..., None] = made["__datatype_make_init__"](**helpers)
        init.__qualname__ = f"{self._cls.__qualname__}.__init__"
        init.__annotations__ = {f.name: f.type for f, _ in self._sets if f.init} | {"return": None}
        self._compiled = init
        if vars(self._cls).get("__init__") is self._stand_in:  # not what was set over it since (a spy)
            self._cls.__init__ = init
        return init


# Where a field's value comes from when the call does not give it (``_FirstInit``).
_MADE, _DEFAULT = "factory", "default"
# An ``InitVar`` annotation, evaluated (``dataclasses.InitVar[int]``) or a string (``InitVar[int]``).
_INIT_VAR = re.compile(r"(dataclasses\.)?InitVar\b")
# The default of an argument whose field has a ``default_factory``: given nothing, the factory makes one.
_FACTORY = type("_Factory", (), {"__repr__": lambda self: "<factory>"})()


def _refuse_unsupported(cls: Any, init: list[dataclasses.Field[Any]]) -> None:
    """What the generated ``__init__`` would refuse as the class is made, and what ``datatype`` does not do."""
    pseudo = set(cls.__dataclass_fields__) - {f.name for f in dataclasses.fields(cls)}
    if any(_INIT_VAR.match(str(cls.__dataclass_fields__[name].type)) for name in pseudo):
        raise TypeError(f"{cls.__qualname__}: datatype takes no InitVar field")
    after_default = False
    for f in init:
        if f.kw_only:
            continue
        if f.default is f.default_factory is dataclasses.MISSING:
            if after_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
        else:
            after_default = True
