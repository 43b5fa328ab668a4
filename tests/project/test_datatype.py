"""``datatype`` against ``dataclasses.dataclass``: the same instances' repr, equality and hash, with
``__repr__`` and ``__eq__`` shared instead of compiled per class; and every dataclass of the package
made with it."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import typing
from dataclasses import field
from pathlib import Path
from typing import Any, ClassVar

import pytest

import pytest_rollouts
from pytest_rollouts import datatype as datatype_module
from pytest_rollouts.datatype import datatype

SHAPES: list[dict[str, Any]] = [{}, {"slots": True}, {"frozen": True}, {"frozen": True, "slots": True}, {"eq": False}]


def _twins(**params: Any) -> tuple[type, type]:
    """One class body made twice: by ``dataclasses.dataclass`` and by ``datatype``."""

    def body(make: Any) -> type:
        @make(**params)
        class Point:
            """A value with every kind of field."""

            x: int
            tags: list[str] = field(default_factory=list)
            note: str = field(default="", repr=False)
            seen: int = field(default=0, compare=False)

        return Point

    return body(dataclasses.dataclass), body(datatype)


@pytest.mark.parametrize("params", SHAPES, ids=[",".join(p) or "plain" for p in SHAPES])
def test_a_datatype_behaves_as_the_same_dataclass(params: dict[str, Any]) -> None:
    reference, made = _twins(**params)
    a, b = made(1, ["x"], "hidden", 5), made(1, ["x"], "other", 6)
    ref_a, ref_b = reference(1, ["x"], "hidden", 5), reference(1, ["x"], "other", 6)
    assert repr(a) == repr(ref_a)
    assert repr(a).endswith("Point(x=1, tags=['x'], seen=5)")
    assert (a == b) is (ref_a == ref_b)
    assert (a == made(2)) is (ref_a == reference(2)) is False
    assert a.__eq__(ref_a) is NotImplemented  # another class, even with the same fields
    assert (made.__hash__ is None) is (reference.__hash__ is None)
    if params.get("frozen"):
        assert hash(made(1, ("x",))) == hash(reference(1, ("x",)))  # type: ignore[arg-type]
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.x = 2
    assert [f.name for f in dataclasses.fields(made)] == [f.name for f in dataclasses.fields(reference)]
    assert dataclasses.asdict(a) == dataclasses.asdict(ref_a)
    assert dataclasses.replace(a, x=3).x == 3
    assert hasattr(a, "__dict__") is hasattr(ref_a, "__dict__")


def _init_twins(**params: Any) -> tuple[type, type]:
    """A class with every kind of ``__init__`` argument and field, made by each decorator."""

    def body(make: Any) -> type:
        @make(**params)
        class Call:
            """Positional, defaulted, made by a factory, left out of ``__init__``, keyword-only."""

            x: int
            y: str = "y"
            tags: list[str] = field(default_factory=list)
            made: list[int] = field(init=False, default_factory=lambda: [0])
            fixed: int = field(init=False, default=3)
            k: int = field(default=9, kw_only=True)
            post: list[str] = field(init=False, default_factory=list)

            def __post_init__(self) -> None:
                self.post.append(f"{self.x}{self.y}")

        return Call

    return body(dataclasses.dataclass), body(datatype)


def _init_compiled(cls: type) -> bool:
    return _compiled(vars(cls)["__init__"])


@pytest.mark.parametrize("params", SHAPES, ids=[",".join(p) or "plain" for p in SHAPES])
def test_init_is_compiled_after_the_generic_instances_and_both_are_the_dataclass_ones(params: dict[str, Any]) -> None:
    reference, made = _init_twins(**params)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((1,), {}), ((2, "b", ["t"]), {"k": 4}), ((), {"x": 5})]
    generic = datatype_module.GENERIC_INSTANCES
    assert not _init_compiled(made)  # no compile as the class is made
    earlier = made(0)
    for number, (args, kwargs) in enumerate(calls * generic, start=1):
        ours, theirs = made(*args, **kwargs), reference(*args, **kwargs)
        assert _init_compiled(made) is (number >= generic)
        assert dataclasses.asdict(ours) == dataclasses.asdict(theirs)
        assert ours.made == [0] and ours.made is not earlier.made  # a factory per instance
        assert ours.tags is not earlier.tags and ours.fixed == 3 and ours.post == theirs.post
        earlier = ours
    assert made.__dataclass_params__.init
    assert made.__init__.__qualname__ == "_init_twins.<locals>.body.<locals>.Call.__init__"


BAD_CALLS = [((), {}), ((1, "y", [], 5), {}), ((1,), {"nope": 1}), ((1,), {"x": 1}), ((1,), {"made": []})]


@pytest.mark.parametrize("args,kwargs", BAD_CALLS, ids=["missing", "too-many", "unknown", "twice", "not-in-init"])
@pytest.mark.parametrize("first", [True, False], ids=["first-instance", "later"])
def test_a_bad_call_raises_as_the_dataclass_init_does(
    args: tuple[Any, ...], kwargs: dict[str, Any], first: bool
) -> None:
    reference, made = _init_twins(frozen=True, slots=True)
    if not first:
        for _ in range(datatype_module.GENERIC_INSTANCES + 1):
            made(0)
    with pytest.raises(TypeError) as theirs:
        reference(*args, **kwargs)
    with pytest.raises(TypeError) as ours:
        made(*args, **kwargs)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("own_init", [False, True], ids=["generated-init", "own-init"])
def test_what_dataclass_refuses_as_a_class_is_made_is_refused(own_init: bool) -> None:
    """A required field after a defaulted one, whether or not the class writes its ``__init__``
    (dataclass checks the order either way); an ``InitVar``, which datatype does not take, but not a
    class variable whose type merely names one."""
    body: dict[str, Any] = {"__annotations__": {"a": "int", "b": "int"}, "a": 0, "__doc__": "Out of order."}
    if own_init:
        body["__init__"] = lambda self: None
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        datatype(type("Order", (), body))

    with pytest.raises(TypeError, match="InitVar"):

        @datatype
        class Passed:
            """A value passed to ``__post_init__`` only: not done here."""

            a: dataclasses.InitVar[int]

    @datatype
    class Registry:
        """A class variable whose type names something like ``InitVar``."""

        known: ClassVar[dict[str, InitVarLimits]] = {}
        x: int = 0

    assert Registry().x == 0


class InitVarLimits:
    """Only a name."""


def test_the_generic_init_takes_what_the_generated_one_takes() -> None:
    """A field named ``self`` by keyword, ``replace`` and a datatype subclass adding fields, before
    any compile; after it, annotations resolve in the class's module, as dataclasses' do."""

    @datatype
    class Named:
        """A field named as ``__init__``'s first argument."""

        self: int
        other: int = 0

    @datatype(frozen=True)
    class Base:
        """Inherited fields come first."""

        path: Path
        tags: list[str] = field(default_factory=list)

    @datatype(frozen=True)
    class Child(Base):
        """Its own field after them, keyword-only."""

        extra: int = field(default=1, kw_only=True)

    assert Named(self=1).self == 1 and dataclasses.replace(Named(1), other=5) == Named(1, 5)
    child = Child(Path("a"), extra=2)
    assert (child.path, child.tags, child.extra) == (Path("a"), [], 2)
    assert dataclasses.replace(child, extra=3) == Child(Path("a"), [], extra=3)
    made = made_by_compiled(Base, Path("b"))
    assert made == Base(Path("b")) and typing.get_type_hints(Base.__init__)["path"] is Path


def made_by_compiled(cls: type, *args: Any) -> Any:
    """An instance made once ``cls`` compiled its ``__init__``."""
    for _ in range(datatype_module.GENERIC_INSTANCES + 1):
        made = cls(*args)
    assert _init_compiled(cls)
    return made


def test_an_init_set_over_the_class_is_kept_when_it_compiles() -> None:
    @datatype
    class Spied:
        """Its ``__init__`` wrapped after the class is made, as a test's spy would."""

        x: int

    original, seen = Spied.__init__, []

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(args)
        original(self, *args, **kwargs)

    Spied.__init__ = spy  # type: ignore[method-assign]
    for number in range(datatype_module.GENERIC_INSTANCES + 5):
        assert Spied(number).x == number
    assert Spied.__init__ is spy and len(seen) == datatype_module.GENERIC_INSTANCES + 5


def test_one_field_or_none_compares_and_hashes_as_a_tuple() -> None:
    @datatype(frozen=True)
    class One:
        """One field: its getter is a function, which must not be bound to the instance."""

        value: int

    @datatype(frozen=True)
    class Empty:
        """No field at all."""

    assert One(1) == One(1) and One(1) != One(2)
    assert hash(One(1)) == hash((1,))
    assert Empty() == Empty() and hash(Empty()) == hash(())
    assert repr(One(1)) == "test_one_field_or_none_compares_and_hashes_as_a_tuple.<locals>.One(value=1)"


def test_methods_a_class_defines_are_kept_and_a_cycle_is_shown_once() -> None:
    @datatype
    class Own:
        """Its own repr and equality."""

        value: int

        def __repr__(self) -> str:
            return "own"

        def __eq__(self, other: object) -> bool:
            return True

    @datatype
    class Node:
        """A value that may hold itself."""

        children: list[Any]

    assert repr(Own(1)) == "own" and Own(1) == object()
    node = Node([])
    node.children.append(node)
    assert repr(node).endswith("Node(children=[...])")


def _hash_rule_bodies(make: Any) -> list[type]:
    """Classes whose hash dataclass decides by what the class defines itself and by ``field(hash=)``."""

    @make(frozen=True)
    class OwnEq:
        """Its own equality, frozen: dataclass still hashes it by its fields."""

        x: int

        def __eq__(self, other: object) -> bool:
            return isinstance(other, OwnEq)

    @make
    class OwnHash:
        """Its own hash, not frozen: kept, where dataclass would make it unhashable."""

        x: int

        def __hash__(self) -> int:
            return 7

    @make(frozen=True)
    class PartlyHashed:
        """A field compared but left out of the hash (a list: hashing it would fail)."""

        x: int
        tags: list[str] = field(default_factory=list, hash=False)

    return [OwnEq, OwnHash, PartlyHashed]


def test_a_datatype_hashes_as_the_same_dataclass() -> None:
    for reference, made in zip(_hash_rule_bodies(dataclasses.dataclass), _hash_rule_bodies(datatype), strict=True):
        assert (made.__hash__ is None) is (reference.__hash__ is None), made.__name__
        assert hash(made(1)) == hash(reference(1)), made.__name__


def test_a_plain_subclass_is_never_equal_to_its_parent() -> None:
    @datatype
    class Parent:
        """Compared by class as well as by fields."""

        x: int

    class Child(Parent):
        """Not a datatype itself: it inherits the parent's methods."""

    assert Parent(1) != Child(1) and Child(1) != Parent(1) and Child(1) == Child(1)


def _package_modules() -> list[Any]:
    names = [info.name for info in pkgutil.walk_packages(pytest_rollouts.__path__, "pytest_rollouts.")]
    optional = ("pytest_rollouts.export.to_wandb", "pytest_rollouts.export.to_mlflow", "pytest_rollouts.__main__")
    return [importlib.import_module(name) for name in names if name not in optional]


def test_every_dataclass_of_the_package_shares_its_repr_and_eq() -> None:
    """ruff bans ``dataclasses.dataclass`` in the package; this checks what was built, decorators
    that wrap it included: each generated ``__repr__`` and ``__eq__`` was a compile at every start."""
    generated = sorted(
        f"{module.__name__}.{name}"
        for module in _package_modules()
        for name, value in vars(module).items()
        if isinstance(value, type) and value.__module__ == module.__name__ and dataclasses.is_dataclass(value)
        for method, shared in (("__repr__", datatype_module._repr), ("__eq__", datatype_module._eq))
        if method in vars(value) and vars(value)[method] is not shared and _compiled(vars(value)[method])
    )
    assert generated == []


def _compiled(method: Any) -> bool:
    """Written by ``dataclasses`` (its source is a string it compiled), not by hand in a class body."""
    code = getattr(getattr(method, "__wrapped__", method), "__code__", None)
    return code is not None and code.co_filename == "<string>"
