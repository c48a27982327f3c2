"""RocketMQ 4.9's SQL92 property filter: parse once, evaluate per message.

    flt = compile_sql92("a > 5 AND TAGS IN ('x', 'y')")
    flt.matches({"a": "7", "TAGS": "x"})      # True

The grammar and the answers follow the 4.9.7 broker's ``rocketmq-filter`` (an ActiveMQ
selector cut down), checked message by message against the Java broker in
``tests/reference/test_java_client.py``:

* keywords ``NOT AND OR BETWEEN IN TRUE FALSE NULL IS`` (any case); comparisons
  ``= <> > >= < <=``; ``x [NOT] BETWEEN lo AND hi``; ``prop [NOT] IN ('s', ...)``;
  ``x IS [NOT] NULL``; unary ``+``/``-``; ``(...)``; ``--`` and ``/* */`` comments.
* literals: ``'it''s'`` strings; ``0``/``12``/``12L`` integers (Java int when they fit,
  else long); ``1.5``/``.5``/``5.``/``1e3`` doubles.
* property names are ``[A-Za-z_$][A-Za-z0-9_$]*``; every message property, ``TAGS`` and
  ``KEYS`` included, is a string, or NULL when the message lacks it.
* three-valued logic: a comparison with a missing property is NULL (unknown); ``AND``/``OR``
  are Kleene; ``NOT NULL`` is NULL; only TRUE delivers the message.
* a string property compared with a number is parsed as that number's Java type
  (``Integer.valueOf``, ``Long.valueOf``, ``Double.valueOf``); with ``TRUE``/``FALSE`` as a
  Java boolean. Two strings under ``> >= < <=`` are both parsed as doubles. A string that
  does not parse makes the message not match (the Java broker logs and skips it).
* ``NOT`` binds tighter than comparisons: ``NOT a = 'x'`` is ``(NOT a) = 'x'``; write
  ``NOT (a = 'x')``. NOT applied to a bare property is FALSE/NULL, as in Java.

Expressions the Java broker refuses are refused here with :class:`FilterExpressionError`
(``a = NULL``, ``a > 'x'``, ``a BETWEEN 5 AND 1``, ``5`` alone, ``1 IN ('a')``, syntax errors).
"""
from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping
from typing import Any, Callable, Optional, Union

from mqcore.errors import FilterExpressionError

__all__ = ["Sql92Filter", "compile_sql92"]

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
MAX_EXPRESSION_CHARS = 64 * 1024


# --- values ------------------------------------------------------------------------------------
# Java boxes: str -> String, bool -> Boolean, float -> Double, JInt/JLong -> Integer/Long.
class JInt(int):
    """A Java Integer (a decimal literal that fits 32 bits)."""


class JLong(int):
    """A Java Long."""


#: what an expression evaluates to: a Java value, or None for NULL
Value = Optional[Union[bool, int, float, str]]


class _Unparsable(Exception):
    """A Java RuntimeException while evaluating: the message does not match."""


_JAVA_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?)")


def _java_double(s: str) -> float:
    t = s.strip(" \t\n\r\f\v\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0e\x0f\x10\x11\x12\x13\x14\x15\x16"
                "\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f")
    if not _JAVA_DOUBLE.fullmatch(t):
        raise _Unparsable(f"not a double: {s!r}")
    t = t.rstrip("fFdD") if not t.endswith("Infinity") else t
    return float(t.replace("Infinity", "inf"))


_JAVA_INTEGER = re.compile(r"[+-]?\d+")


def _java_integral(s: str, lo: int, hi: int) -> int:
    if not _JAVA_INTEGER.fullmatch(s):
        raise _Unparsable(f"not an integer: {s!r}")
    v = int(s)
    if not lo <= v <= hi:
        raise _Unparsable(f"out of range: {s!r}")
    return v


def _double_bits(d: float) -> int:
    if math.isnan(d):
        return 0x7FF8000000000000
    bits: int = struct.unpack(">q", struct.pack(">d", d))[0]
    return bits


def _cmp_double(a: float, b: float) -> int:
    """Java ``Double.compare``: -0.0 < 0.0, NaN above everything and equal to itself."""
    if a < b:
        return -1
    if a > b:
        return 1
    x, y = _double_bits(a), _double_bits(b)
    return (x > y) - (x < y)


def _cmp_str(a: str, b: str) -> int:
    """Java ``String.compareTo`` (UTF-16 code units)."""
    x, y = a.encode("utf-16-be", "surrogatepass"), b.encode("utf-16-be", "surrogatepass")
    return (x > y) - (x < y)


def _java_compare(lv: Any, rv: Any) -> int:
    """``ComparisonExpression.__compare`` with string conversion on: widen numbers, parse a
    string towards the other side's type; incomparable types answer -1, as in Java.

    The operands are ``Value``s; typed ``Any`` because the dispatch is on their exact
    classes (``JInt`` vs ``JLong``) held in ``lt``/``rt``, which mypy does not narrow."""
    lt, rt = type(lv), type(rv)
    if lt is not rt:
        if lt is bool:
            if rt is not str:
                return -1
            rv = rv.lower() == "true"
        elif lt in (JInt, JLong):
            if rt in (JInt, JLong):
                pass  # both integral: Python ints compare exactly, as Java's widening does
            elif rt is float:
                lv = float(lv)
            elif rt is str:
                rv = _java_integral(rv, INT_MIN, INT_MAX) if lt is JInt else _java_integral(rv, LONG_MIN, LONG_MAX)
            else:
                return -1
        elif lt is float:
            if rt in (JInt, JLong):
                rv = float(rv)
            elif rt is str:
                rv = _java_double(rv)
            else:
                return -1
        elif lt is str:
            if rt is bool:
                lv = lv.lower() == "true"
            elif rt is JInt:
                lv = _java_integral(lv, INT_MIN, INT_MAX)
            elif rt is JLong:
                lv = _java_integral(lv, LONG_MIN, LONG_MAX)
            elif rt is float:
                lv = _java_double(lv)
            else:
                return -1
    if isinstance(lv, float) or isinstance(rv, float):
        return _cmp_double(float(lv), float(rv))
    if isinstance(lv, str):
        return _cmp_str(lv, rv)
    return int(lv > rv) - int(lv < rv)


def _java_equals(lv: Value, rv: Value) -> bool:
    if type(lv) is not type(rv):
        return False  # Java equals() never crosses classes; compare() decides then
    if type(lv) is float and type(rv) is float:
        return _double_bits(lv) == _double_bits(rv)
    return lv == rv


# --- expression nodes (each evaluates to a value, or None for NULL) -----------------------------
Props = Mapping[str, str]
Node = Callable[[Props], Value]


class _Expr:
    """``kind``: "constant" (string/number literal), "property", "boolean" (comparisons,
    logic, and the TRUE/FALSE/NULL literals, which Java also types as booleans) or "value"
    (a negation). ``const``: a literal, whose ``value`` is known at parse time."""

    def __init__(self, fn: Node, kind: str = "value", value: Value = None, text: str = "",
                 const: bool = False) -> None:
        self.fn, self.kind, self.value, self.text, self.const = fn, kind, value, text, const

    def __str__(self) -> str:
        return self.text


def _const(value: Value, text: str) -> _Expr:
    kind = "boolean" if value is None or type(value) is bool else "constant"
    return _Expr(lambda props: value, kind, value, text, const=True)


def _property(name: str) -> _Expr:
    return _Expr(lambda props: props.get(name), "property", None, name)


def _as_boolean(e: _Expr) -> _Expr:
    if e.kind == "boolean":
        return e
    if e.kind == "property":
        def cast(props: Props, f: Node = e.fn) -> Value:
            v = f(props)
            if v is None:
                return None
            return v if type(v) is bool else False
        return _Expr(cast, "boolean", text=e.text)
    raise FilterExpressionError(f"Expression will not result in a boolean value: {e}")


def _and(a: _Expr, b: _Expr) -> _Expr:
    def ev(props: Props) -> Value:
        lv = a.fn(props)
        if lv is False:
            return False
        rv = b.fn(props)
        if rv is False:
            return False
        return None if lv is None or rv is None else True
    return _Expr(ev, "boolean", text=f"({a}) AND ({b})")


def _or(a: _Expr, b: _Expr) -> _Expr:
    def ev(props: Props) -> Value:
        lv = a.fn(props)
        if lv is True:
            return True
        rv = b.fn(props)
        if rv is True:
            return True
        return None if lv is None or rv is None else False
    return _Expr(ev, "boolean", text=f"({a}) OR ({b})")


def _not(a: _Expr) -> _Expr:
    def ev(props: Props) -> Value:
        v = a.fn(props)
        return None if v is None else not v
    return _Expr(ev, "boolean", text=f"NOT {a}")


def _negate(a: _Expr) -> _Expr:
    def ev(props: Props) -> Value:
        v = a.fn(props)
        if type(v) is JInt:
            return JInt(-v if v != INT_MIN else v)  # Java int negation wraps
        if type(v) is JLong:
            return JLong(-v if v != LONG_MIN else v)
        if type(v) is float:
            return -v
        return None
    return _Expr(ev, "value", text=f"-{a}")


def _check_ordered(e: _Expr) -> None:
    if e.const and isinstance(e.value, (int, float)) and type(e.value) is not bool:
        return
    if e.const or e.kind == "boolean":
        raise FilterExpressionError(f"Value '{e}' cannot be compared.")


def _ordered(op: str, a: _Expr, b: _Expr) -> _Expr:
    _check_ordered(a)
    _check_ordered(b)
    tests: dict[str, Callable[[int], bool]] = {">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0,
                                               "<=": lambda c: c <= 0}
    test = tests[op]

    def ev(props: Props) -> Value:
        lv = a.fn(props)
        if lv is None:
            return None
        rv = b.fn(props)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            try:
                lv, rv = _java_double(lv), _java_double(rv)
            except _Unparsable as e:
                raise _Unparsable(f"It's illegal to compare string by '{op}'") from e
        return test(_java_compare(lv, rv))
    return _Expr(ev, "boolean", text=f"{a} {op} {b}")


def _equal(a: _Expr, b: _Expr, *, checked: bool = True) -> _Expr:
    if checked:
        for e in (a, b):
            if e.const and e.value is None:
                raise FilterExpressionError(f"'{e}' cannot be compared.")
        if a.const and b.const and a.kind == "boolean" and b.kind != "boolean":
            raise FilterExpressionError(f"'{a}' cannot be compared with '{b}'")

    def ev(props: Props) -> Value:
        lv, rv = a.fn(props), b.fn(props)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is rv or _java_equals(lv, rv):
            return True
        return _java_compare(lv, rv) == 0
    return _Expr(ev, "boolean", text=f"{a} = {b}")


def _in(a: _Expr, values: list[str], negated: bool) -> _Expr:
    if a.kind != "property":
        raise FilterExpressionError(f"Expected a property for In expression, got: {a}")
    wanted = frozenset(values)

    def ev(props: Props) -> Value:
        v = a.fn(props)
        if v is None or type(v) is not str:
            return None
        return (v in wanted) != negated
    return _Expr(ev, "boolean", text=f"{a} {'NOT ' if negated else ''}IN {sorted(wanted)}")


def _between(v: _Expr, lo: _Expr, hi: _Expr, negated: bool) -> _Expr:
    if lo.const and hi.const:
        if lo.value is None or hi.value is None:
            raise FilterExpressionError("Illegal values of between, values can not be null!")
        try:
            if _java_compare(hi.value, lo.value) < 0:
                raise FilterExpressionError(f"Illegal values of between, left value({lo}) must less than or "
                                            f"equal to right value({hi})")
        except _Unparsable as e:
            raise FilterExpressionError(f"Illegal values of between: {e}") from e
    if negated:
        return _or(_ordered("<", v, lo), _ordered(">", v, hi))
    return _and(_ordered(">=", v, lo), _ordered("<=", v, hi))


# --- tokens ------------------------------------------------------------------------------------
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\n\r\f]+|--[^\n\r]*(?:\r\n|\n|\r|$)|/\*[^*]*\*+(?:[^*/][^*]*\*+)*/)
  | (?P<float>\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>(?:0|[1-9]\d*[lL]?))
  | (?P<str>'(?:''|[^'])*')
  | (?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><>|>=|<=|[=><(),+-])
""", re.VERBOSE)
_KEYWORDS = {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"}


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise FilterExpressionError(f"unexpected character {text[pos]!r} at column {pos + 1}")
        kind, image = m.lastgroup, m.group()
        assert kind is not None  # every alternative of _TOKEN is a named group
        if kind == "id" and image.upper() in _KEYWORDS:
            kind, image = "kw", image.upper()
        if kind != "ws":
            out.append((kind, image, pos))
        pos = m.end()
    out.append(("eof", "", len(text)))
    return out


class _Parser:
    """Recursive descent over RocketMQ's selector grammar (one method per production)."""

    def __init__(self, text: str) -> None:
        self.toks = _tokenize(text)
        self.i = 0

    def peek(self, k: int = 0) -> tuple[str, str, int]:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def at(self, image: str, k: int = 0) -> bool:
        kind, img, _ = self.peek(k)
        return kind in ("kw", "op") and img == image

    def take(self, image: str) -> None:
        if not self.at(image):
            kind, img, pos = self.peek()
            raise FilterExpressionError(f"expected {image!r} at column {pos + 1}, found {img or 'end of input'!r}")
        self.i += 1

    def parse(self) -> _Expr:
        e = _as_boolean(self.or_expr())
        kind, img, pos = self.peek()
        if kind != "eof":
            raise FilterExpressionError(f"unexpected {img!r} at column {pos + 1}")
        return e

    def or_expr(self) -> _Expr:
        left = self.and_expr()
        while self.at("OR"):
            self.i += 1
            left = _or(_as_boolean(left), _as_boolean(self.and_expr()))
        return left

    def and_expr(self) -> _Expr:
        left = self.equality()
        while self.at("AND"):
            self.i += 1
            left = _and(_as_boolean(left), _as_boolean(self.equality()))
        return left

    def equality(self) -> _Expr:
        left = self.comparison()
        while True:
            if self.at("="):
                self.i += 1
                left = _equal(left, self.comparison())
            elif self.at("<>"):
                self.i += 1
                left = _not(_equal(left, self.comparison()))
            elif self.at("IS") and self.at("NULL", 1):
                self.i += 2
                left = _equal(left, _const(None, "NULL"), checked=False)
            elif self.at("IS") and self.at("NOT", 1) and self.at("NULL", 2):
                self.i += 3
                left = _not(_equal(left, _const(None, "NULL"), checked=False))
            else:
                return left

    def comparison(self) -> _Expr:
        left = self.unary()
        while True:
            kind, img, _ = self.peek()
            if kind == "op" and img in (">", ">=", "<", "<="):
                self.i += 1
                left = _ordered(img, left, self.unary())
            elif self.at("BETWEEN") or (self.at("NOT") and self.at("BETWEEN", 1)):
                negated = self.at("NOT")
                self.i += 2 if negated else 1
                lo = self.unary()
                self.take("AND")
                left = _between(left, lo, self.unary(), negated)
            elif self.at("IN") or (self.at("NOT") and self.at("IN", 1)):
                negated = self.at("NOT")
                self.i += 2 if negated else 1
                self.take("(")
                values = [self.string()]
                while self.at(","):
                    self.i += 1
                    values.append(self.string())
                self.take(")")
                left = _in(left, values, negated)
            else:
                return left

    def unary(self) -> _Expr:
        if self.at("+"):
            self.i += 1
            return self.unary()
        if self.at("-"):
            self.i += 1
            return _negate(self.unary())
        if self.at("NOT"):
            self.i += 1
            return _not(_as_boolean(self.unary()))
        return self.primary()

    def primary(self) -> _Expr:
        kind, img, pos = self.peek()
        if kind == "op" and img == "(":
            self.i += 1
            e = self.or_expr()
            self.take(")")
            return e
        self.i += 1
        if kind == "str":
            return _const(img[1:-1].replace("''", "'"), img)
        if kind == "int":
            digits = img.rstrip("lL")
            v = int(digits)
            if v > LONG_MAX:
                raise FilterExpressionError(f"integer literal {img} is out of range")
            return _const(JInt(v) if v <= INT_MAX else JLong(v), img)
        if kind == "float":
            return _const(float(img), img)
        if kind == "kw" and img in ("TRUE", "FALSE"):
            return _const(img == "TRUE", img)
        if kind == "kw" and img == "NULL":
            return _const(None, img)
        if kind == "id":
            return _property(img)
        self.i -= 1
        raise FilterExpressionError(f"unexpected {img or 'end of input'!r} at column {pos + 1}")

    def string(self) -> str:
        kind, img, pos = self.peek()
        if kind != "str":
            raise FilterExpressionError(f"expected a string literal at column {pos + 1}, found {img!r}")
        self.i += 1
        return img[1:-1].replace("''", "'")


class Sql92Filter:
    """A compiled expression. ``matches`` is safe on any property map: an evaluation error
    (a string that does not parse as the number it is compared with) is "no match"."""

    __slots__ = ("expression", "_root")

    def __init__(self, expression: str, root: _Expr) -> None:
        self.expression = expression
        self._root = root

    def evaluate(self, properties: dict[str, str]) -> Value:
        """TRUE, FALSE or None (unknown); raises nothing."""
        try:
            return self._root.fn(properties)
        except _Unparsable:
            return None

    def matches(self, properties: dict[str, str]) -> bool:
        return self.evaluate(properties) is True

    def __repr__(self) -> str:
        return f"Sql92Filter({self.expression!r})"


def compile_sql92(expression: str) -> Sql92Filter:
    """Parse ``expression``; raises :class:`FilterExpressionError` saying what is wrong."""
    if expression is None or not expression.strip():
        raise FilterExpressionError("the SQL92 expression is empty")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise FilterExpressionError(f"the SQL92 expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        root = _Parser(expression).parse()
    except RecursionError as e:
        raise FilterExpressionError("the SQL92 expression is nested too deeply") from e
    except FilterExpressionError as e:
        raise FilterExpressionError(f"Invalid SQL92 expression {expression!r}: {e}") from None
    return Sql92Filter(expression, root)
