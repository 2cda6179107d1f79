"""Safe evaluation of rule conditions (the ``when`` clauses of the rule pack).

Security model: rule expressions are parsed with ``ast.parse`` and the whole tree is checked
against a small whitelist (constants, metric names, boolean/arithmetic/comparison operators,
conditional expressions, tuple/list literals after ``in``) before anything runs; calls,
attributes, subscripts, comprehensions and names starting with ``_`` are refused. Evaluation
walks the validated tree through precompiled closures (no eval/exec), with limits on source
size, nesting depth, ``**`` and integer size. Message templates (``{metric:spec}`` only)
are :mod:`diagnose.rules.message`.
"""

from __future__ import annotations

import ast
import io
import operator
import tokenize
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from diagnose.errors import ExpressionError
from diagnose.values import as_real

__all__ = [
    "DivisionByZero",
    "Expr",
    "MissingMetric",
    "compile_expr",
]

MAX_SOURCE_CHARS = 2000
MAX_DEPTH = 40
MAX_INT_BITS = 400
MAX_POW_EXPONENT = 64
MAX_POW_BASE = 1e6

Metrics = Mapping[str, object]
_Fn = Callable[[Metrics], object]


class MissingMetric(Exception):  # noqa: N818 - the name is the API
    """A metric the expression or message needs is absent or None (or a divisor was zero).

    Not a ``DiagnoseError``: the engine reports the rule as "not evaluated (needs NAME)".
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"needs {self.name}"


class DivisionByZero(MissingMetric):
    """A division (``/``, ``//``, ``%``, or ``**`` with a negative exponent) by zero.

    A subclass of MissingMetric, so that callers that only know that class still treat the
    expression as not computable; ``expr`` is the division's source, e.g. ``'x / 0'``.
    """

    def __init__(self, divisor: str, expr: str) -> None:
        super().__init__(divisor)
        self.args = (divisor, expr)  # so that it pickles
        self.expr = expr

    def __str__(self) -> str:
        return f"division by zero in {self.expr!r}"


class _EvalError(Exception):
    """Internal: a refusal found while evaluating; Expr.evaluate adds the source."""


def _short(src: str, limit: int = 80) -> str:
    if len(src) > limit:
        src = src[: limit - 3] + "..."
    return repr(src)


def _tname(value: object) -> str:
    return type(value).__name__


# ---------------------------------------------------------------------------------------------
# runtime helpers


def _num(value: object) -> int | float:
    t = type(value)
    if t is int or t is float or t is bool:
        return value  # type: ignore[return-value]
    r = as_real(value)  # numpy integers and floats and the like
    if r is None:
        raise TypeError
    return r


def _nums(sym: str, a: object, b: object) -> tuple[int | float, int | float]:
    try:
        return _num(a), _num(b)
    except TypeError:
        raise _EvalError(
            f"unsupported operand types for '{sym}': {_tname(a)} and {_tname(b)}"
        ) from None


def _check_int(result: object) -> object:
    if type(result) is int and result.bit_length() > MAX_INT_BITS:
        raise _EvalError(f"integer result too large (more than {MAX_INT_BITS} bits)")
    return result


def _add(a: object, b: object) -> object:
    if type(a) is str and type(b) is str:
        return a + b
    x, y = _nums("+", a, b)
    return _check_int(x + y)


def _sub(a: object, b: object) -> object:
    x, y = _nums("-", a, b)
    return _check_int(x - y)


def _mul(a: object, b: object) -> object:
    x, y = _nums("*", a, b)
    return _check_int(x * y)


_SIMPLE_BINOPS: dict[type[ast.operator], Callable[[object, object], object]] = {
    ast.Add: _add,
    ast.Sub: _sub,
    ast.Mult: _mul,
}

_DIV_BINOPS: dict[type[ast.operator], tuple[str, Callable[[object, object], object]]] = {
    ast.Div: ("/", operator.truediv),
    ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod),
}

_REFUSED_BINOPS: dict[type[ast.operator], str] = {
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.MatMult: "@",
}


def _pow(a: object, b: object, base_text: str, expr_text: str = "") -> object:
    x, y = _nums("**", a, b)
    if not abs(y) <= MAX_POW_EXPONENT:
        raise _EvalError(
            f"exponent too large for '**' (abs(exponent) must be <= {MAX_POW_EXPONENT})"
        )
    if not abs(x) <= MAX_POW_BASE:
        raise _EvalError("base too large for '**' (abs(base) must be <= 1e6)")
    try:
        result = x**y
    except ZeroDivisionError:
        raise DivisionByZero(base_text, expr_text or base_text) from None
    if type(result) is complex:
        raise _EvalError("'**' result is not a real number")
    return _check_int(result)


def _contains(a: object, b: object) -> bool:
    return a in b  # type: ignore[operator]


def _not_contains(a: object, b: object) -> bool:
    return a not in b  # type: ignore[operator]


_CMPOPS: dict[type[ast.cmpop], tuple[str, Callable[[Any, Any], object]]] = {
    ast.Eq: ("==", operator.eq),
    ast.NotEq: ("!=", operator.ne),
    ast.Lt: ("<", operator.lt),
    ast.LtE: ("<=", operator.le),
    ast.Gt: (">", operator.gt),
    ast.GtE: (">=", operator.ge),
    ast.In: ("in", _contains),
    ast.NotIn: ("not in", _not_contains),
    ast.Is: ("is", operator.is_),
    ast.IsNot: ("is not", operator.is_not),
}


def _compare(sym: str, fn: Callable[[object, object], object], a: object, b: object) -> object:
    try:
        return fn(a, b)
    except TypeError:
        raise _EvalError(f"cannot compare {_tname(a)} and {_tname(b)} with '{sym}'") from None


# ---------------------------------------------------------------------------------------------
# compilation

_REFUSED_NODES: dict[type[ast.AST], str] = {
    ast.Call: "function calls are not allowed",
    ast.Attribute: "attribute access is not allowed",
    ast.Subscript: "subscripts (indexing) are not allowed",
    ast.Slice: "slices are not allowed",
    ast.Lambda: "lambda is not allowed",
    ast.ListComp: "comprehensions are not allowed (list comprehension)",
    ast.SetComp: "comprehensions are not allowed (set comprehension)",
    ast.DictComp: "comprehensions are not allowed (dict comprehension)",
    ast.GeneratorExp: "comprehensions are not allowed (generator expression)",
    ast.NamedExpr: "assignment expressions (:=) are not allowed",
    ast.Starred: "starred expressions are not allowed",
    ast.Dict: "dict literals are not allowed",
    ast.Set: "set literals are not allowed",
    ast.JoinedStr: "f-strings are not allowed",
    ast.FormattedValue: "f-strings are not allowed",
    ast.Await: "await is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
}

_CONSTANT_TYPES = (int, float, str, bool, type(None))


def _const_fn(value: object) -> _Fn:
    def fn(m: Metrics) -> object:
        return value

    return fn


class _Compiler:
    def __init__(self, src: str) -> None:
        self.src = src
        self.names: set[str] = set()

    def refuse(self, why: str) -> ExpressionError:
        return ExpressionError(f"rule expression {_short(self.src)}: {why}")

    def fold(self, fn: _Fn) -> _Fn:
        """Evaluate an all-constant subtree now, so its errors surface at compile time."""
        try:
            value = fn({})
        except _EvalError as exc:
            raise self.refuse(str(exc)) from None
        except DivisionByZero as exc:
            raise self.refuse(str(exc)) from None
        except MissingMetric as exc:  # pragma: no cover - constants name no metric
            raise self.refuse(f"needs {exc.name}") from None
        return _const_fn(value)

    def compile(self, node: ast.AST, lenient: bool = False) -> tuple[_Fn, bool]:
        """Return (closure, is_constant). ``lenient``: a missing/None name reads as None."""
        t = type(node)
        if t is ast.Constant:
            return self.constant(node), True  # type: ignore[arg-type]
        if t is ast.Name:
            return self.name(node, lenient), False  # type: ignore[arg-type]
        if t is ast.BoolOp:
            return self.boolop(node, lenient)  # type: ignore[arg-type]
        if t is ast.UnaryOp:
            return self.unaryop(node)  # type: ignore[arg-type]
        if t is ast.BinOp:
            return self.binop(node)  # type: ignore[arg-type]
        if t is ast.Compare:
            return self.compare(node)  # type: ignore[arg-type]
        if t is ast.IfExp:
            return self.ifexp(node, lenient)  # type: ignore[arg-type]
        if t is ast.Tuple or t is ast.List:
            raise self.refuse("tuple/list literals are only allowed after 'in' / 'not in'")
        why = _REFUSED_NODES.get(t, f"{t.__name__} is not allowed")
        raise self.refuse(why)

    def constant(self, node: ast.Constant) -> _Fn:
        value = node.value
        if type(value) not in _CONSTANT_TYPES:
            raise self.refuse(f"constants of type {_tname(value)} are not allowed")
        if type(value) is int and value.bit_length() > MAX_INT_BITS:
            raise self.refuse(f"integer constant too large (more than {MAX_INT_BITS} bits)")
        return _const_fn(value)

    def name(self, node: ast.Name, lenient: bool) -> _Fn:
        name = node.id
        if name.startswith("_"):
            raise self.refuse(f"names starting with '_' are not allowed ({name!r})")
        if not isinstance(node.ctx, ast.Load):
            raise self.refuse(f"assignment to {name!r} is not allowed")
        self.names.add(name)
        if lenient:

            def lenient_fn(m: Metrics) -> object:
                return m.get(name)

            return lenient_fn

        def fn(m: Metrics) -> object:
            value = m.get(name)
            if value is None:
                raise MissingMetric(name)
            return value

        return fn

    def boolop(self, node: ast.BoolOp, lenient: bool) -> tuple[_Fn, bool]:
        is_or = isinstance(node.op, ast.Or)
        last = len(node.values) - 1
        compiled = [
            self.compile(v, lenient=(is_or and i < last) or lenient)
            for i, v in enumerate(node.values)
        ]
        fns = [f for f, _ in compiled]
        fn = fns[-1]
        for left in reversed(fns[:-1]):
            fn = _or_fn(left, fn) if is_or else _and_fn(left, fn)
        if all(c for _, c in compiled):
            return self.fold(fn), True
        return fn, False

    def unaryop(self, node: ast.UnaryOp) -> tuple[_Fn, bool]:
        operand, const = self.compile(node.operand)
        op = node.op
        if isinstance(op, ast.Not):

            def fn(m: Metrics) -> object:
                return not operand(m)

        elif isinstance(op, (ast.USub, ast.UAdd)):
            neg = isinstance(op, ast.USub)
            sym = "-" if neg else "+"

            def fn(m: Metrics) -> object:
                value = operand(m)
                try:
                    x = _num(value)
                except TypeError:
                    raise _EvalError(
                        f"bad operand type for unary '{sym}': {_tname(value)}"
                    ) from None
                return -x if neg else +x

        else:
            raise self.refuse("operator '~' is not allowed")
        return (self.fold(fn), True) if const else (fn, False)

    def binop(self, node: ast.BinOp) -> tuple[_Fn, bool]:
        op_t = type(node.op)
        if op_t in _REFUSED_BINOPS:
            raise self.refuse(f"operator '{_REFUSED_BINOPS[op_t]}' is not allowed")
        left, lconst = self.compile(node.left)
        right, rconst = self.compile(node.right)
        fn: _Fn
        if op_t in _SIMPLE_BINOPS:
            opf = _SIMPLE_BINOPS[op_t]

            def fn(m: Metrics) -> object:
                return opf(left(m), right(m))

        elif op_t in _DIV_BINOPS:
            sym, divf = _DIV_BINOPS[op_t]
            divisor = ast.unparse(node.right)
            whole = ast.unparse(node)

            def fn(m: Metrics) -> object:
                x, y = _nums(sym, left(m), right(m))
                try:
                    return _check_int(divf(x, y))
                except ZeroDivisionError:
                    raise DivisionByZero(divisor, whole) from None
                except OverflowError:
                    raise _EvalError(f"numeric overflow in '{sym}'") from None

        elif op_t is ast.Pow:
            base_text = ast.unparse(node.left)
            whole = ast.unparse(node)

            def fn(m: Metrics) -> object:
                try:
                    return _pow(left(m), right(m), base_text, whole)
                except OverflowError:
                    raise _EvalError("numeric overflow in '**'") from None

        else:  # pragma: no cover - every ast.operator is handled above
            raise self.refuse(f"operator {op_t.__name__} is not allowed")
        return (self.fold(fn), True) if lconst and rconst else (fn, False)

    def compare(self, node: ast.Compare) -> tuple[_Fn, bool]:
        operands = [node.left, *node.comparators]
        ops: list[tuple[str, Callable[[object, object], object]]] = []
        is_ops: list[bool] = []
        for i, op in enumerate(node.ops):
            op_t = type(op)
            if op_t is ast.Is or op_t is ast.IsNot:
                if not any(_is_none(operands[j]) for j in (i, i + 1)):
                    raise self.refuse("'is' / 'is not' may only compare with None")
                is_ops.append(True)
            else:
                is_ops.append(False)
            ops.append(_CMPOPS[op_t])

        fns: list[_Fn] = []
        all_const = True
        for j, operand in enumerate(operands):
            after_in = j > 0 and isinstance(node.ops[j - 1], (ast.In, ast.NotIn))
            if after_in and isinstance(operand, (ast.Tuple, ast.List)):
                f, c = self.sequence(operand)
            else:
                adjacent = is_ops[max(j - 1, 0) : j + 1]
                f, c = self.compile(operand, lenient=all(adjacent))
            fns.append(f)
            all_const = all_const and c

        fn: _Fn
        if len(ops) == 1:
            (sym, opf), left, right = ops[0], fns[0], fns[1]

            def fn(m: Metrics) -> object:
                return _compare(sym, opf, left(m), right(m))

        else:
            steps = list(zip(ops, fns[1:], strict=True))
            first = fns[0]

            def fn(m: Metrics) -> object:
                a = first(m)
                result: object = True
                for (sym, opf), f in steps:
                    b = f(m)
                    result = _compare(sym, opf, a, b)
                    if not result:
                        return result
                    a = b
                return result

        return (self.fold(fn), True) if all_const else (fn, False)

    def sequence(self, node: ast.Tuple | ast.List) -> tuple[_Fn, bool]:
        compiled = [self.compile(e) for e in node.elts]
        if all(c for _, c in compiled):
            return _const_fn(tuple(f({}) for f, _ in compiled)), True
        fns = [f for f, _ in compiled]

        def fn(m: Metrics) -> object:
            return tuple(f(m) for f in fns)

        return fn, False

    def ifexp(self, node: ast.IfExp, lenient: bool) -> tuple[_Fn, bool]:
        test, tconst = self.compile(node.test)
        body, bconst = self.compile(node.body, lenient)
        orelse, oconst = self.compile(node.orelse, lenient)

        def fn(m: Metrics) -> object:
            return body(m) if test(m) else orelse(m)

        if tconst and bconst and oconst:
            return self.fold(fn), True
        return fn, False


def _and_fn(left: _Fn, right: _Fn) -> _Fn:
    def fn(m: Metrics) -> object:
        return left(m) and right(m)

    return fn


def _or_fn(left: _Fn, right: _Fn) -> _Fn:
    def fn(m: Metrics) -> object:
        return left(m) or right(m)

    return fn


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _paren_depth(src: str) -> int:
    depth = deepest = 0
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.OP:
            if tok.string in ("(", "[", "{"):
                depth += 1
                deepest = max(deepest, depth)
            elif tok.string in (")", "]", "}"):
                depth -= 1
    return deepest


def _node_depth(root: ast.AST) -> int:
    """Deepest nesting of expression nodes, computed without recursion."""
    deepest = 0
    stack: list[tuple[ast.AST, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, ast.expr):
            depth += 1
            deepest = max(deepest, depth)
        stack.extend((child, depth) for child in ast.iter_child_nodes(node))
    return deepest


class Expr:
    """A validated rule expression; compile once with `compile_expr`, evaluate many times."""

    __slots__ = ("src", "names", "_fn")

    def __init__(self, src: str, names: frozenset[str], fn: _Fn) -> None:
        self.src = src
        self.names = names
        self._fn = fn

    def evaluate(self, metrics: Metrics) -> object:
        """Evaluate against ``metrics``; raises MissingMetric or ExpressionError."""
        try:
            return self._fn(metrics)
        except _EvalError as exc:
            raise ExpressionError(f"rule expression {_short(self.src)}: {exc}") from None
        except (TypeError, ValueError, OverflowError) as exc:  # safety net, not expected
            raise ExpressionError(f"rule expression {_short(self.src)}: {exc}") from None

    def __repr__(self) -> str:
        return f"Expr({self.src!r})"


def compile_expr(src: str) -> Expr:
    """Parse and validate ``src``; raises ExpressionError naming what was refused."""
    if not isinstance(src, str):
        raise ExpressionError(f"rule expression must be a string, not {_tname(src)}")
    if len(src) > MAX_SOURCE_CHARS:
        raise ExpressionError(
            f"rule expression {_short(src)}: too long "
            f"({len(src)} characters, at most {MAX_SOURCE_CHARS})"
        )
    comp = _Compiler(src)
    text = src.strip()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise comp.refuse(f"syntax error: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise comp.refuse(f"cannot parse: {_tname(exc)}: {exc}") from None
    try:
        parens = _paren_depth(text)
    except (tokenize.TokenError, SyntaxError, ValueError) as exc:
        raise comp.refuse(f"cannot tokenize: {exc}") from None
    if parens > MAX_DEPTH or _node_depth(tree) > MAX_DEPTH:
        raise comp.refuse(f"nested deeper than {MAX_DEPTH} levels")
    fn, _ = comp.compile(tree.body)
    return Expr(src, frozenset(comp.names), fn)
