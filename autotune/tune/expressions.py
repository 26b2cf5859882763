"""Restriction strings in Kernel Tuner's style (``"block_size_x*tile>=32"``), read safely.

A string is parsed with :mod:`ast` and checked once: it may use only the names of the tunable
parameters, numbers, strings, ``True``/``False``, arithmetic (``+ - * / // % **``), comparisons
(including ``in`` a list or tuple of constants), ``and``/``or``/``not`` and ``x if c else y``.
It is then evaluated by walking that tree here: nothing is ever passed to ``eval`` or
``compile``, so a string such as ``"__import__('os').system('x')"`` is refused when the space
is made, with a message that says what is allowed.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Longer restriction strings are refused before they are parsed.
MAX_EXPRESSION_CHARS = 1000
#: ``a ** b`` with a larger exponent is refused when evaluated (no kernel parameter needs it).
MAX_EXPONENT = 64

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Not: operator.not_,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_ALLOWED = ("names of tunable parameters, numbers, strings, True/False, + - * / // % **, "
            "comparisons (== != < <= > >=, in a list of constants), and, or, not, x if c else y")


class ExpressionError(ValueError):
    """A restriction or grid divisor string that is not a safe expression over the parameters."""


def _describe(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001 - only for the message
        return type(node).__name__


def _check(node: ast.AST, names: frozenset[str], text: str, what: str) -> None:
    """Raise :class:`ExpressionError` unless every node of the tree is one we evaluate."""
    def refuse(why: str) -> ExpressionError:
        return ExpressionError(f"{what} {text!r}: {why}; a {what} may use only {_ALLOWED}")

    if isinstance(node, ast.Expression):
        _check(node.body, names, text, what)
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, complex) or not isinstance(node.value, (bool, int, float, str)):
            raise refuse(f"the constant {node.value!r} is not a number, string or boolean")
    elif isinstance(node, ast.Name):
        if node.id not in names:
            listed = ", ".join(sorted(names)) or "none"
            raise ExpressionError(
                f"{what} {text!r} names {node.id!r}, which is not a tunable parameter "
                f"(tune_params has {listed}); name only tunable parameters")
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check(node.left, names, text, what)
        _check(node.right, names, text, what)
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        _check(node.operand, names, text, what)
    elif isinstance(node, ast.BoolOp):
        for value in node.values:
            _check(value, names, text, what)
    elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        _check(node.left, names, text, what)
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(right, (ast.List, ast.Tuple)) or not all(
                        isinstance(e, ast.Constant) for e in right.elts):
                    raise refuse(f"'in' needs a list or tuple of constants, not {_describe(right)}")
                for element in right.elts:
                    _check(element, names, text, what)
            else:
                _check(right, names, text, what)
    elif isinstance(node, ast.IfExp):
        for part in (node.test, node.body, node.orelse):
            _check(part, names, text, what)
    elif isinstance(node, ast.Call):
        raise refuse(f"it calls {_describe(node.func)}(...), and calls are not allowed")
    elif isinstance(node, ast.Attribute):
        raise refuse(f"it reads the attribute {_describe(node)}, and attributes are not allowed")
    else:
        raise refuse(f"{_describe(node)!r} ({type(node).__name__}) is not allowed")


def _evaluate(node: ast.AST, values: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, values)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, values), _evaluate(node.right, values)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > MAX_EXPONENT:
            raise ExpressionError(f"exponent {right} is larger than {MAX_EXPONENT}")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_evaluate(node.operand, values))
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            result: Any = True
            for value in node.values:
                result = _evaluate(value, values)
                if not result:
                    return result
            return result
        result = False
        for value in node.values:
            result = _evaluate(value, values)
            if result:
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, values)
        for op, right_node in zip(node.ops, node.comparators):
            if isinstance(right_node, (ast.List, ast.Tuple)):
                right: Any = tuple(_evaluate(e, values) for e in right_node.elts)
            else:
                right = _evaluate(right_node, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        chosen = node.body if _evaluate(node.test, values) else node.orelse
        return _evaluate(chosen, values)
    raise ExpressionError(f"cannot evaluate {type(node).__name__}")  # refused by _check first


@dataclass(frozen=True)
class Expression:
    """A checked expression over named parameters; call it with a dict of their values."""

    text: str
    tree: ast.Expression
    names: frozenset[str]  #: the parameter names it uses

    def __call__(self, values: Mapping[str, Any]) -> Any:
        return _evaluate(self.tree, values)


def parse_expression(text: Any, names: Iterable[str], what: str = "restriction") -> Expression:
    """Parse ``text`` as an expression over ``names`` and check that it uses only what
    :data:`_ALLOWED` lists; :class:`ExpressionError` naming the problem otherwise."""
    if not isinstance(text, str):
        raise ExpressionError(f"{what} {text!r} is not a string")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"{what} is {len(text)} characters long (at most "
                              f"{MAX_EXPRESSION_CHARS}); write shorter expressions")
    allowed = frozenset(names)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"{what} {text!r} is not a Python expression: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise ExpressionError(f"{what} {text!r} cannot be parsed: {type(exc).__name__}") from None
    try:
        _check(tree, allowed, text, what)
    except RecursionError:
        raise ExpressionError(f"{what} {text!r} is nested too deeply") from None
    used = frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))
    return Expression(text, tree, used)
