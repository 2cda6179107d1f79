"""Rule messages: ``{metric:spec}`` templates and nothing else (no attributes, indexing,
conversions or nested fields), filled from a rule's metrics; a metric without a value
raises :class:`~diagnose.rules.condition.MissingMetric`, like a condition that needs it."""

from __future__ import annotations

import functools
import re
import string
import sys
from collections.abc import Mapping

from diagnose.errors import ExpressionError
from diagnose.rules.condition import MissingMetric, _short, _tname

__all__ = ["format_message", "template_names"]


_Z = "z?" if sys.version_info >= (3, 11) else ""
_SPEC_RE = re.compile(
    r"(?:.?[<>=^])?[-+ ]?" + _Z + r"#?0?(?:\d{1,3})?[,_]?(?:\.\d{1,3})?[bcdeEfFgGnosxX%]?",
    re.DOTALL,
)


@functools.lru_cache(maxsize=1024)
def _parse_template(template: str) -> tuple[tuple[str, str | None, str], ...]:
    def refuse(why: str) -> ExpressionError:
        return ExpressionError(f"message template {_short(template)}: {why}")

    try:
        items = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise refuse(str(exc)) from None
    parts: list[tuple[str, str | None, str]] = []
    for literal, field, spec, conversion in items:
        if field is None:
            parts.append((literal, None, ""))
            continue
        if field == "":
            raise refuse("empty field '{}' is not allowed; name a metric")
        if not field.isidentifier() or field.startswith("_"):
            raise refuse(f"field {{{field}}} is not a plain metric name")
        if conversion is not None:
            raise refuse(f"conversion '!{conversion}' in field {{{field}}} is not allowed")
        spec = spec or ""
        if "{" in spec or "}" in spec:
            raise refuse(f"nested fields in the format spec of {{{field}}} are not allowed")
        if not _SPEC_RE.fullmatch(spec):
            raise refuse(f"invalid format spec {spec!r} in field {{{field}}}")
        parts.append((literal, field, spec))
    return tuple(parts)


def _check_template(template: str) -> tuple[tuple[str, str | None, str], ...]:
    if not isinstance(template, str):
        raise ExpressionError(f"message template must be a string, not {_tname(template)}")
    return _parse_template(template)


def template_names(template: str) -> frozenset[str]:
    """The metric names a message template needs (validates the template)."""
    return frozenset(f for _, f, _ in _check_template(template) if f is not None)


def format_message(template: str, values: Mapping[str, object]) -> str:
    """Fill ``{metric:spec}`` fields from ``values``; a None/missing value raises MissingMetric."""
    out: list[str] = []
    for literal, field, spec in _check_template(template):
        out.append(literal)
        if field is None:
            continue
        value = values.get(field)
        if value is None:
            raise MissingMetric(field)
        try:
            out.append(format(value, spec))
        except (ValueError, TypeError, OverflowError) as exc:
            raise ExpressionError(
                f"message template {_short(template)}: cannot format {field} "
                f"({_tname(value)}) with {spec!r}: {exc}"
            ) from None
    return "".join(out)
