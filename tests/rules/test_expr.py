"""Tests for the rule-expression evaluator and the message formatter (diagnose.rules.condition)."""

from __future__ import annotations

import contextlib
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnose.errors import DiagnoseError, ExpressionError, RuleError
from diagnose.rules.condition import Expr, MissingMetric, compile_expr
from diagnose.rules.message import format_message, template_names

METRICS: dict[str, object] = {
    "a": 3,
    "b": 4.5,
    "zero": 0,
    "flag": True,
    "off": False,
    "name": "ampere",
    "none": None,
    "dataloader_share": 0.25,
    "gpu_busy_frac": 0.5,
    "memcpy_h2d_pageable_count": 2,
    "device_cc_major": 8,
}


def ev(src: str, metrics: dict[str, object] | None = None) -> object:
    return compile_expr(src).evaluate(METRICS if metrics is None else metrics)


# --------------------------------------------------------------------------------------------
# correct results


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("1 + 2", 3),
        ("a + b", 7.5),
        ("a - 10", -7),
        ("a * 2", 6),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 3", 1),
        ("b % 2", 0.5),
        ("2 ** 10", 1024),
        ("a ** 2", 9),
        ("2 ** -1", 0.5),
        ("-a", -3),
        ("+b", 4.5),
        ("-(-a)", 3),
        ("(a + 1) * 2 - 1", 7),
        ("flag + 1", 2),
        ("'amp' + 'ere'", "ampere"),
        ("1e3", 1000.0),
        ("'x'", "x"),
        ("True", True),
        ("None", None),
    ],
)
def test_arithmetic(src: str, expected: object) -> None:
    result = ev(src)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("src", "expected"),
    [
        ("a > 1", True),
        ("a < 1", False),
        ("a >= 3", True),
        ("a <= 2.9", False),
        ("a == 3", True),
        ("a != 3", False),
        ("1 < a < 4", True),
        ("1 < a < 3", False),
        ("1 < a <= 3 < b", True),
        ("0 < zero < 1", False),
        ("5 > b > a > 0", True),
        ("name == 'ampere'", True),
        ("name < 'b'", True),
        ("dataloader_share >= 0.10 and gpu_busy_frac < 0.6", True),
        ("dataloader_share >= 0.30 and gpu_busy_frac < 0.6", False),
        ("memcpy_h2d_pageable_count > 0", True),
        ("device_cc_major in (7, 8, 9)", True),
        ("device_cc_major in [7, 9]", False),
        ("device_cc_major not in (7, 9)", True),
        ("device_cc_major in (a + 5, 1)", True),
        ("'amp' in name", True),
        ("'xyz' not in name", True),
        ("a if b > 1 else zero", 3),
        ("a if b > 10 else zero", 0),
        ("'big' if a > 2 else 'small'", "big"),
        ("not flag", False),
        ("not off", True),
        ("not zero", True),
        ("flag and off", False),
        ("flag or off", True),
        ("off or a", 3),
        ("zero and missing", 0),
        ("a and b", 4.5),
        ("off or zero or a", 3),
        ("flag and a and b", 4.5),
        ("none is None", True),
        ("missing is None", True),
        ("a is None", False),
        ("a is not None", True),
        ("missing is not None", False),
        ("None is missing", True),
        ("(missing or 0) > 0.2", False),
        ("(none or 0) + 1", 1),
        ("(missing or a) > 2", True),
        ("(missing or none or 7) == 7", True),
        ("(a or 0) > 2", True),
        ("missing is not None and missing > 1", False),
        ("a is not None and a > 1", True),
        ("missing is None or missing > 1", True),
        ("flag or missing", True),
        ("off and missing", False),
        ("a if a > 1 else missing", 3),
        ("missing if a < 1 else b", 4.5),
        ("(missing if a < 1 else none) is None", True),
    ],
)
def test_comparisons_and_logic(src: str, expected: object) -> None:
    assert ev(src) == expected


def test_names_and_src() -> None:
    expr = compile_expr("dataloader_share >= 0.10 and (idle_launch_frac or 0) > 0.2")
    assert isinstance(expr, Expr)
    assert expr.src == "dataloader_share >= 0.10 and (idle_launch_frac or 0) > 0.2"
    assert expr.names == frozenset({"dataloader_share", "idle_launch_frac"})
    assert compile_expr("1 + 2").names == frozenset()


def test_compile_once_evaluate_many() -> None:
    expr = compile_expr("x * 2 if x > 0 else -x")
    assert [expr.evaluate({"x": v}) for v in (-2, -1, 0, 1, 2)] == [2, 1, 0, 2, 4]


def test_whitespace_and_newlines_around() -> None:
    assert compile_expr("\n   a > 1\n").evaluate({"a": 2}) is True
    assert compile_expr("(a > 1 and\n b < 2)").evaluate({"a": 2, "b": 1}) is True


def test_numpy_scalars() -> None:
    np = pytest.importorskip("numpy")
    metrics = {"i": np.int64(3), "f": np.float64(0.5)}
    assert compile_expr("i * 2 + f").evaluate(metrics) == 6.5
    assert compile_expr("i ** 2").evaluate(metrics) == 9
    assert compile_expr("f < 1 < i").evaluate(metrics)


# --------------------------------------------------------------------------------------------
# missing metrics


@pytest.mark.parametrize(
    ("src", "missing"),
    [
        ("missing > 1", "missing"),
        ("none > 1", "none"),
        ("a > 1 and missing > 1", "missing"),
        ("off or missing", "missing"),
        ("missing or none", "none"),
        ("missing and a", "missing"),
        ("not missing", "missing"),
        ("-missing", "missing"),
        ("a + missing", "missing"),
        ("a in (1, missing)", "missing"),
        ("missing if a > 1 else 0", "missing"),
        ("a if missing else 0", "missing"),
        ("(missing > 1) or a", "missing"),
        ("missing is None and missing > 1", "missing"),
        ("a / zero", "zero"),
        ("a // zero", "zero"),
        ("a % zero", "zero"),
        ("a / (a - 3)", "a - 3"),
        ("b % (zero * 2)", "zero * 2"),
        ("zero ** -1", "zero"),
    ],
)
def test_missing_metric(src: str, missing: str) -> None:
    with pytest.raises(MissingMetric) as info:
        ev(src)
    assert info.value.name == missing
    assert missing in str(info.value)


def test_missing_metric_is_not_a_diagnose_error() -> None:
    assert not issubclass(MissingMetric, DiagnoseError)
    err = pickle.loads(pickle.dumps(MissingMetric("x")))
    assert err.name == "x"


def test_missing_metric_empty_mapping() -> None:
    expr = compile_expr("gpu_busy_frac < 0.6")
    with pytest.raises(MissingMetric) as info:
        expr.evaluate({})
    assert info.value.name == "gpu_busy_frac"


# --------------------------------------------------------------------------------------------
# refusals at compile time

NESTED_PARENS = "(" * 100 + "1" + ")" * 100
NESTED_NEG = "-(" * 100 + "1" + ")" * 100
LONG_EXPR = " + ".join(["a"] * 1667)  # 5000 characters


@pytest.mark.parametrize(
    ("src", "why"),
    [
        ("__import__('os').system('true')", "call"),
        ("().__class__.__bases__[0].__subclasses__()", "call"),
        ("a.b", "attribute"),
        ("foo.bar > 1", "attribute"),
        ("a[0]", "subscript"),
        ("a[1:2]", "subscript"),
        ("max(a, b)", "call"),
        ("min(a, b) > 1", "call"),
        ("len(name)", "call"),
        ("lambda: 1", "lambda"),
        ("[x for x in y]", "comprehension"),
        ("{x for x in y}", "comprehension"),
        ("{k: v for k, v in y}", "comprehension"),
        ("(x for x in y)", "comprehension"),
        ("(y := 1)", ":="),
        ("_secret > 1", "'_'"),
        ("__builtins__", "'_'"),
        ("a + _x", "'_'"),
        ('f"{a}"', "f-string"),
        ("{'a': 1}", "dict"),
        ("{1, 2}", "set"),
        ("a in {1, 2}", "set"),
        ("(*a,)", "tuple/list"),
        ("a in (*b, 1)", "starred"),
        ("(1, 2)", "tuple"),
        ("[1, 2] == a", "tuple/list"),
        ("a is b", "None"),
        ("a is not 1", "None"),
        ("a & 1", "'&'"),
        ("a | 1", "'|'"),
        ("a ^ 1", "'^'"),
        ("a << 1", "'<<'"),
        ("a >> 1", "'>>'"),
        ("a @ b", "'@'"),
        ("~a", "'~'"),
        ("b'x'", "bytes"),
        ("1j", "complex"),
        ("...", "ellipsis"),
        ("2 ** 100000", "exponent too large"),
        ("10 ** 10 ** 10", "exponent too large"),
        ("(10 ** 7) ** 2", "base too large"),
        ("2 ** 64 * 2 ** 64 * 2 ** 64 * 2 ** 64 * 2 ** 64 * 2 ** 64 * 2 ** 64", "400 bits"),
        ("1" * 130, "400 bits"),
        ("'a' * 3", "unsupported operand"),
        ("'a' % 3", "unsupported operand"),
        ("1 < 'a'", "cannot compare"),
        ("1 / 0", "division by zero"),
        ("(-8) ** 0.5", "not a real number"),
        ("1e300 ** 2", "base too large"),
        ("1e6 ** 60", "overflow"),
        (NESTED_PARENS, "nested deeper"),
        (NESTED_NEG, "nested deeper"),
        ("not " * 50 + "a", "nested deeper"),
        ("[" * 45 + "]" * 45, "nested deeper"),
        (LONG_EXPR, "too long"),
        ("a >", "syntax error"),
        ("a = 1", "syntax error"),
        ("import os", "syntax error"),
        ("a > 1; b", "syntax error"),
        ("a\n> 1", "syntax error"),
        ("(", "syntax error"),
        ("", "syntax error"),
        ("a\x00", "null bytes"),
        ("(" * 300 + ")" * 300, "parenthes"),
    ],
)
def test_refused_at_compile_time(src: str, why: str) -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expr(src)
    message = str(info.value)
    assert why.lower() in message.lower()
    assert message.startswith("rule expression ")
    assert "\n" not in message
    assert len(message) < 300
    assert isinstance(info.value, RuleError)


def test_refusal_message_names_expression() -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expr("foo.bar > 1")
    assert str(info.value) == "rule expression 'foo.bar > 1': attribute access is not allowed"


def test_non_string_source() -> None:
    with pytest.raises(ExpressionError):
        compile_expr(123)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# refusals at evaluation time


@pytest.mark.parametrize(
    ("src", "metrics", "why"),
    [
        ("x ** 100000", {"x": 2}, "exponent too large"),
        ("10 ** x", {"x": 10**10}, "exponent too large"),
        ("x ** 2", {"x": 10**7}, "base too large"),
        ("x ** x", {"x": 1e300}, "exponent too large"),
        ("x * x * x * x", {"x": 2**120}, "400 bits"),
        ("x + 1", {"x": 2**400}, "400 bits"),
        ("x ** 0.5", {"x": -4}, "not a real number"),
        ("x ** 60", {"x": 1e6}, "overflow"),
        ("x < 1", {"x": "s"}, "cannot compare str and int with '<'"),
        ("1 >= x", {"x": "s"}, "cannot compare int and str with '>='"),
        ("x < y < 1", {"x": 0, "y": "s"}, "cannot compare"),
        ("x in y", {"x": 1, "y": 5}, "cannot compare"),
        ("x in y", {"x": 1, "y": "abc"}, "cannot compare"),
        ("x * 3", {"x": "s"}, "unsupported operand types for '*': str and int"),
        ("x + 1", {"x": "s"}, "unsupported operand"),
        ("x / 2", {"x": "s"}, "unsupported operand"),
        ("x ** 2", {"x": "s"}, "unsupported operand"),
        ("-x", {"x": "s"}, "bad operand type"),
        ("x / y", {"x": 2**1100, "y": 3}, "overflow"),
    ],
)
def test_refused_at_evaluation(src: str, metrics: dict[str, object], why: str) -> None:
    expr = compile_expr(src)
    with pytest.raises(ExpressionError) as info:
        expr.evaluate(metrics)
    assert why in str(info.value)
    assert str(info.value).startswith(f"rule expression {src!r}: ")


# --------------------------------------------------------------------------------------------
# property: random input never escapes as anything but ExpressionError

TOKEN_TEXT = (
    "a b x _x None True 1 0 2.5 's' ( ) [ ] { } , : . + - * ** / // % < <= == != > "
    "in not is and or if else lambda for = := @ ~"
)
TOKENS = TOKEN_TEXT.split()


def _check_random(src: str) -> None:
    try:
        expr = compile_expr(src)
    except ExpressionError:
        return
    with contextlib.suppress(ExpressionError, MissingMetric):
        expr.evaluate({"a": 2, "b": 0.5, "x": "s"})


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_random_text_only_expression_errors(src: str) -> None:
    _check_random(src)


@settings(max_examples=250, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=20).map(" ".join))
def test_random_tokens_only_expression_errors(src: str) -> None:
    _check_random(src)


# --------------------------------------------------------------------------------------------
# format_message / template_names


@pytest.mark.parametrize(
    ("template", "values", "expected"),
    [
        (
            "{dataloader_share:.1%} of step time waiting on DataLoader "
            "({dataloader_wait_ms_per_step:.1f} ms per step)",
            {"dataloader_share": 0.253, "dataloader_wait_ms_per_step": 12.345},
            "25.3% of step time waiting on DataLoader (12.3 ms per step)",
        ),
        ("plain text", {}, "plain text"),
        ("", {}, ""),
        ("{n} copies", {"n": 3}, "3 copies"),
        ("{n:,} bytes", {"n": 1234567}, "1,234,567 bytes"),
        ("{n:_d}", {"n": 1234567}, "1_234_567"),
        ("{x:>8.2f}|", {"x": 3.14159}, "    3.14|"),
        ("{x:*^9}", {"x": "mid"}, "***mid***"),
        ("{x:+.3e}", {"x": 1234.5}, "+1.234e+03"),
        ("{x:#x}", {"x": 255}, "0xff"),
        ("{x:08.3f}", {"x": -1.5}, "-001.500"),
        ("{x:.0%}", {"x": True}, "100%"),
        ("{name} on sm_{cc}", {"name": "A100", "cc": 80}, "A100 on sm_80"),
        ("{{literal}} {x}", {"x": 1}, "{literal} 1"),
        ("}}{{", {}, "}{"),
        ("{x}{x}", {"x": "ab"}, "abab"),
    ],
)
def test_format_message(template: str, values: dict[str, object], expected: str) -> None:
    assert format_message(template, values) == expected


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("{a.__class__}", "not a plain metric name"),
        ("{a.b}", "not a plain metric name"),
        ("{a[0]}", "not a plain metric name"),
        ("{0}", "not a plain metric name"),
        ("{_secret}", "not a plain metric name"),
        ("{ a }", "not a plain metric name"),
        ("{}", "empty field"),
        ("{a!r}", "conversion '!r'"),
        ("{a!s}", "conversion '!s'"),
        ("{a!a}", "conversion '!a'"),
        ("{a:{b}}", "nested fields"),
        ("{a:.{b}f}", "nested fields"),
        ("{a:.1000f}", "invalid format spec"),
        ("{a:1000}", "invalid format spec"),
        ("{a:abc}", "invalid format spec"),
        ("{a:.2q}", "invalid format spec"),
        ("{a", "message template"),
        ("a}", "message template"),
        ("{a!}", "message template"),
    ],
)
def test_format_message_refused(template: str, why: str) -> None:
    with pytest.raises(ExpressionError) as info:
        format_message(template, {"a": 1.0, "b": 2})
    assert why in str(info.value)
    assert str(info.value).startswith("message template ")
    with pytest.raises(ExpressionError):
        template_names(template)


@pytest.mark.parametrize(
    ("template", "values", "missing"),
    [
        ("{a:.1f} ms", {}, "a"),
        ("{a:.1f} ms", {"a": None}, "a"),
        ("{a} and {b}", {"a": 1}, "b"),
    ],
)
def test_format_message_missing(template: str, values: dict[str, object], missing: str) -> None:
    with pytest.raises(MissingMetric) as info:
        format_message(template, values)
    assert info.value.name == missing


def test_format_message_type_mismatch() -> None:
    with pytest.raises(ExpressionError) as info:
        format_message("{a:.1f}", {"a": "text"})
    assert "cannot format a (str)" in str(info.value)


@pytest.mark.parametrize(
    ("template", "names"),
    [
        ("{a:.1%} of {b:.1f} ({a})", {"a", "b"}),
        ("no fields {{here}}", set()),
        ("", set()),
    ],
)
def test_template_names(template: str, names: set[str]) -> None:
    assert template_names(template) == frozenset(names)
