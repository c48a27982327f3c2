"""RocketMQ's SQL92 property filter (mqcore.filter.sql92). Its answers are checked message by
message against the Java broker in tests/reference/test_java_client.py; these tests pin the
rules and the error messages, and fuzz the parser."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore.errors import FilterExpressionError, MQError
from mqcore.filter.sql92 import compile_sql92


def ev(expr, **props):
    return compile_sql92(expr).evaluate(props)


@pytest.mark.parametrize("expr, props, want", [
    ("a > 5", {"a": "7"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a > 5", {}, None),                               # missing property: unknown
    ("a > 5", {"a": "x"}, None),                       # not an int: the message does not match
    ("a > 5", {"a": "5.5"}, None),                     # Integer.valueOf refuses "5.5"
    ("a > 5.0", {"a": "5.5"}, True),                   # a double literal parses it as a double
    ("a > 5", {"a": "+6"}, True),
    ("a > 2147483648", {"a": "2147483649"}, True),     # a long literal
    ("a = 5", {"a": "5"}, True),
    ("a = '5'", {"a": "5"}, True),
    ("a <> 'x'", {}, None),                            # NOT of unknown stays unknown
    ("a IS NULL", {}, True),
    ("a IS NOT NULL", {}, False),
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a NOT IN ('x', 'y')", {"a": "z"}, True),
    ("a NOT IN ('x', 'y')", {}, None),
    ("a BETWEEN 1 AND 3", {"a": "3"}, True),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
    ("flag = TRUE", {"flag": "True"}, True),           # Boolean.valueOf ignores case
    ("flag = TRUE", {"flag": "yes"}, False),
    ("a > 1 AND b > 1", {"a": "0"}, False),            # Kleene: FALSE AND unknown = FALSE
    ("a > 1 OR b > 1", {"a": "2"}, True),              # TRUE OR unknown = TRUE
    ("a > 1 OR b > 1", {"a": "0"}, None),
    ("a > b", {"a": "2.5", "b": "10"}, False),         # two strings compare as doubles
    ("TAGS = 'TagA' AND KEYS IS NOT NULL", {"TAGS": "TagA", "KEYS": "k"}, True),
    ("b = 'it''s'", {"b": "it's"}, True),
    ("a >= 5 -- the rest is a comment", {"a": "5"}, True),
    ("a /* here */ < 1e1", {"a": "9"}, True),
    ("and_x > 1 and AND_X < 3", {"and_x": "2", "AND_X": "2"}, True),  # keywords any case, names exact
    ("NOT (a > 5)", {"a": "1"}, True),
    ("TRUE", {}, True),
    ("x", {"x": "true"}, False),                       # a bare property: a string is no boolean
])
def test_rules(expr, props, want):
    assert ev(expr, **props) is want
    assert compile_sql92(expr).matches(props) is (want is True)


@pytest.mark.parametrize("expr, message", [
    ("a = NULL", "'NULL' cannot be compared"),
    ("a > 'x'", "cannot be compared"),
    ("a BETWEEN 5 AND 1", "must less than or equal"),
    ("5", "will not result in a boolean value"),
    ("1 IN ('1')", "Expected a property for In expression"),
    ("a IN (1)", "expected a string literal"),
    ("a >", "end of input"),
    ("a == 1", "unexpected '='"),
    ("a ! 1", "unexpected character '!'"),
    ("(a > 1", "expected ')'"),
    ("", "empty"),
    ("a > 99999999999999999999", "out of range"),
])
def test_refused_expressions_say_why(expr, message):
    with pytest.raises(FilterExpressionError) as e:
        compile_sql92(expr)
    assert message in str(e.value)
    assert isinstance(e.value, MQError)


def test_deep_nesting_is_an_error_not_a_crash():
    with pytest.raises(FilterExpressionError):
        compile_sql92("(" * 5000 + "a > 1" + ")" * 5000)


_tokens = st.sampled_from(["a", "b", "TAGS", "'x'", "'it''s'", "5", "5.5", "-", "+", "(", ")", "=", "<>", ">",
                           ">=", "<", "<=", "AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE",
                           ",", "1e3", "7L", "$x", "--", "/*", "*/", "\n"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_tokens, max_size=14), st.dictionaries(st.sampled_from(["a", "b", "TAGS", "$x"]),
                                                        st.text(max_size=6), max_size=3))
def test_any_token_soup_compiles_or_is_refused_and_never_raises_when_evaluated(tokens, props):
    try:
        flt = compile_sql92(" ".join(tokens))
    except FilterExpressionError:
        return
    assert flt.evaluate(props) in (True, False, None)


@settings(max_examples=100, deadline=None)
@given(st.integers(-10**6, 10**6), st.integers(-10**6, 10**6))
def test_integer_comparisons_agree_with_python(x, y):
    assert ev(f"a < {y}", a=str(x)) is (x < y)  # a negative literal is a negation, as in Java
    assert ev(f"a = {abs(y)}", a=str(x)) is (x == abs(y))
    lo, hi = sorted((x, y))
    assert ev(f"a BETWEEN {abs(lo)} AND {abs(hi) + abs(lo)}", a=str(x)) is (abs(lo) <= x <= abs(hi) + abs(lo))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=8), st.lists(st.text(max_size=8), min_size=1, max_size=4))
def test_in_is_exact_string_membership(value, options):
    literal = ", ".join("'" + o.replace("'", "''") + "'" for o in options)
    assert ev(f"a IN ({literal})", a=value) is (value in options)
    assert ev(f"a NOT IN ({literal})", a=value) is (value not in options)
