"""The tool_use suite's tools: plain, type-hinted Python functions with docstrings.

The built-in model agent offers every function in ``TOOLS`` to the model (the JSON schema of
each comes from its signature, the description from the first paragraph of its docstring), runs
the calls the model makes, and sends the results back as the next turn's input.

A tool returns a string the model reads. Bad input is answered with an ``error: ...`` string
rather than an exception: a model that sent a bad expression should see why and may retry.
"""

from __future__ import annotations

import ast
import json
import operator
from pathlib import Path

FACTS_FILE = Path(__file__).resolve().parent / "facts.json"
ATTRIBUTES = ("population", "area_km2", "founded")

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPRESSION = 200  # characters
MAX_EXPONENT = 64
MAX_MAGNITUDE = 10**30


def _evaluate(node: ast.AST) -> int | float:
    """The value of an arithmetic syntax tree; anything but numbers and operators is refused."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent larger than {MAX_EXPONENT}")
        value = _BINARY[type(node.op)](left, right)
        if not isinstance(value, int | float):  # (-8) ** 0.5 is a complex number
            raise ValueError("the result is not a real number")
        if abs(value) > MAX_MAGNITUDE:
            raise ValueError("result too large")
        return value
    raise ValueError(f"unsupported syntax: {type(node).__name__}")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Supports numbers, parentheses and the operators + - * / // % **, e.g. "(1200 - 845) * 3".
    Division by / gives a decimal; // divides and rounds down.
    """
    if len(expression) > MAX_EXPRESSION:
        return f"error: expression longer than {MAX_EXPRESSION} characters"
    try:
        # ast.parse only builds a tree; nothing in it runs. _evaluate walks numbers and operators
        # and refuses names, calls, attributes and everything else.
        value = _evaluate(ast.parse(expression.strip(), mode="eval"))
    except ZeroDivisionError:
        return "error: division by zero"
    except (SyntaxError, ValueError, TypeError, OverflowError) as exc:
        return f"error: {exc}"
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        return repr(round(value, 6))
    return str(value)


def _facts() -> dict[str, dict[str, int]]:
    with FACTS_FILE.open(encoding="utf-8") as f:
        return {city.lower(): values for city, values in json.load(f).items()}


def lookup(key: str) -> str:
    """Look up a fact about a city in the reference table.

    The key is "<city>.<attribute>", e.g. "Varnholt.population"; the attributes are population,
    area_km2 (area in square kilometres) and founded (the year the city was founded).
    """
    city, _, attribute = key.strip().lower().rpartition(".")
    facts = _facts()
    if not city or attribute not in ATTRIBUTES:
        return f"error: a key is '<city>.<attribute>' with attribute one of {', '.join(ATTRIBUTES)}"
    if city not in facts:
        return f"error: no city named {city!r} in the table"
    return str(facts[city][attribute])


TOOLS = [calculator, lookup]
