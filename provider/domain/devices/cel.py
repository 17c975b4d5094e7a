"""CEL selectors of DRA claims and DeviceClasses, evaluated with cel-python (celpy).

The environment is the one Kubernetes gives DRA selectors
(https://kubernetes.io/docs/reference/using-api/cel/ and the DRA concept page): a
`device` with `driver`, `attributes[domain][name]` and `capacity[domain][name]`, plus
Kubernetes' quantity and semver libraries (`quantity("80Gi")`, `.compareTo()`,
`.isGreaterThan()`, `.isLessThan()`, `.asInteger()`, `semver("1.2.3")`, `.major()` ...).

A selector that uses anything else cannot be judged here; it is an
`UnsupportedSelector`, never a silent match. A runtime error on one device (an
attribute the device does not have) makes that device not match, as the scheduler's
allocator treats it.

A selector beyond Kubernetes' bounds (length, cost) or nested deeper than the evaluator
can follow (provider.domain.devices.limits) is a `SelectorOverLimit`: refused before it
is evaluated, never a RecursionError."""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from provider.domain.devices import budget, limits
from provider.domain.devices.explain import term_summary
from provider.domain.devices.model import AttrValue, Device, Version
from provider.domain.devices.quantity import parse_milli

ParseQuantity = Callable[[str], int]  # a Kubernetes quantity in milli-units
Verdict = bool | str  # True / False, or the runtime error that made the device not match


class UnsupportedSelector(Exception):
    """A selector allset cannot evaluate (syntax, or a function it does not model)."""

    def __init__(self, expression: str, why: str) -> None:
        super().__init__(f"selector {short(expression)!r}: {why}")
        self.expression = expression
        self.why = why


class SelectorOverLimit(UnsupportedSelector):
    """A selector longer, deeper or costlier than allset (or Kubernetes) allows."""


def _parsed(env: celpy.Environment, expression: str) -> lark.Tree[Any]:
    """The selector's tree within the limits; raises SelectorOverLimit or CELParseError."""
    why = limits.before_parse(expression)
    if why is not None:
        raise SelectorOverLimit(expression, why)
    tree = env.compile(expression)  # LALR: no recursion, however deep it nests
    why = limits.after_parse(tree)
    if why is not None:
        raise SelectorOverLimit(expression, why)
    return tree


@functools.cache
def _checker() -> celpy.Environment:
    return celpy.Environment()


@functools.lru_cache(maxsize=1024)
def _checked(expression: str) -> tuple[str | None, int]:
    """(why the selector is beyond the limits, or None; allset's estimate of its cost, 0
    when it is refused or does not parse): one parse for both."""
    try:
        return None, limits.cost_of(_parsed(_checker(), expression))
    except SelectorOverLimit as err:
        return err.why, 0
    except CELParseError:
        return None, 0


def selector_problem(expression: str) -> str | None:
    """Why a selector is beyond the limits, or None (one that does not parse is not: the
    planner reports it as unsupported, as it does a function allset does not model)."""
    return _checked(expression)[0]


def selector_cost(expression: str) -> int:
    """allset's estimate of the selector's cost (0 for one that does not parse, or beyond
    the limits: those are refused for that)."""
    return _checked(expression)[1]


def request_cost_problem(expressions: Iterable[str]) -> str | None:
    """Why a request's selectors (its claims' and their DeviceClasses') are refused
    together, or None: each is evaluated on every kind of device its pods' groups publish,
    so their sum bounds the request's evaluation work."""
    distinct = set(expressions)
    total = sum(selector_cost(e) for e in distinct)
    if total <= limits.MAX_REQUEST_COST:
        return None
    return (f"the request's {len(distinct)} distinct DRA selectors have an estimated cost "
            f"of {total} together; allset evaluates at most {limits.MAX_REQUEST_COST} for "
            "one request")


def short(expression: str) -> str:
    """A selector as messages quote it: a 10 KiB one is not repeated whole."""
    return expression if len(expression) <= 120 else f"{expression[:100]}...{expression[-10:]}"


class CelQuantity(celtypes.IntType):
    """A quantity as CEL sees it (milli-units underneath)."""


class CelSemver(celtypes.StringType):
    version: Version


def _semver(value: Version) -> CelSemver:
    out = CelSemver(value.text)
    out.version = value
    return out


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, CelSemver) and isinstance(b, CelSemver):
        return a.version.compare(b.version)
    if isinstance(a, CelQuantity) and isinstance(b, CelQuantity):
        return (int(a) > int(b)) - (int(a) < int(b))
    raise TypeError(f"cannot compare {type(a).__name__} with {type(b).__name__}")


def _library(parse_quantity: ParseQuantity) -> dict[str, Callable[..., Any]]:
    def quantity(text: Any) -> CelQuantity:
        return CelQuantity(parse_quantity(str(text)))

    def semver(text: Any) -> CelSemver:
        return _semver(Version.parse(str(text)))

    def version_part(index: int) -> Callable[[Any], celtypes.IntType]:
        def part(v: Any) -> celtypes.IntType:
            if not isinstance(v, CelSemver):
                raise TypeError("not a semver")
            return celtypes.IntType(v.version.key[index])
        return part

    def is_quantity(text: Any) -> celtypes.BoolType:
        try:
            parse_quantity(str(text))
        except ValueError:
            return celtypes.BoolType(False)
        return celtypes.BoolType(True)

    def is_semver(text: Any) -> celtypes.BoolType:
        try:
            Version.parse(str(text))
        except ValueError:
            return celtypes.BoolType(False)
        return celtypes.BoolType(True)

    return {
        "quantity": quantity,
        "isQuantity": is_quantity,
        "semver": semver,
        "isSemver": is_semver,
        "compareTo": lambda a, b: celtypes.IntType(_compare(a, b)),
        "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
        "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
        "asInteger": lambda q: celtypes.IntType(int(q) // 1000),
        "asApproximateFloat": lambda q: celtypes.DoubleType(int(q) / 1000),
        "isInteger": lambda q: celtypes.BoolType(int(q) % 1000 == 0),
        "sign": lambda q: celtypes.IntType((int(q) > 0) - (int(q) < 0)),
        "add": lambda a, b: CelQuantity(int(a) + int(b)),
        "sub": lambda a, b: CelQuantity(int(a) - int(b)),
        "major": version_part(0),
        "minor": version_part(1),
        "patch": version_part(2),
        # Kubernetes' strings extension, the part DRA selectors use.
        "lowerAscii": lambda s: celtypes.StringType(str(s).lower()),
        "upperAscii": lambda s: celtypes.StringType(str(s).upper()),
    }


# Selectors that ran out of their steps, by digest (a tenant can make them without end,
# each up to 10 KiB). Past this many they are forgotten at once: one seen again is then
# found over its budget again, or, if a plan's cached fit answers first, said unsupported
# (never a match) rather than invalid.
_MAX_OVER_BUDGET = 100_000
_MAX_REMEMBERED = 100_000  # compiled selectors, verdicts: forgotten all at once beyond this
_MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter"})


_LITERAL_TOKENS = frozenset({"STRING_LIT", "MLSTRING_LIT", "INT_LIT", "UINT_LIT", "FLOAT_LIT",
                             "BYTES_LIT", "MLBYTES_LIT", "BOOL_LIT"})


def _called(tree: lark.Tree[Any]) -> set[str]:
    names = set()
    for sub in tree.iter_subtrees():
        if sub.data == "ident_arg":
            names.add(str(sub.children[0]))
        elif sub.data == "member_dot_arg":
            names.add(str(sub.children[1]))
    return names


def _conjuncts(tree: lark.Tree[Any], source: str) -> list[str]:
    """The top-level `&&` terms of an expression, as source text."""
    node = tree
    while node.data in ("expr", "conditionalor") and len(node.children) == 1:
        child = node.children[0]
        if not isinstance(child, lark.Tree):
            break
        node = child
    if node.data != "conditionaland":
        return [source.strip()]
    out: list[str] = []

    def walk(n: lark.Tree[Any]) -> None:
        for child in n.children:
            if isinstance(child, lark.Tree) and child.data == "conditionaland":
                walk(child)
            elif isinstance(child, lark.Tree):
                out.append(source[child.meta.start_pos:child.meta.end_pos].strip())

    walk(node)
    return out




def _literal(tree: object) -> bool:
    """Whether an operand is one literal, so the name it reads is written in the source."""
    if not isinstance(tree, lark.Tree):
        return True
    values = list(tree.scan_values(lambda v: isinstance(v, lark.Token)))
    return len(values) == 1 and values[0].type in _LITERAL_TOKENS


def _computed_name(tree: lark.Tree[Any]) -> bool:
    """Whether the selector reads a map entry by a name it computes (`m["prod" + "uct"]`,
    `x in m` for a non-literal x): that name is in none of its literals."""
    for sub in tree.iter_subtrees():
        if sub.data == "member_index" and not _literal(sub.children[1]):
            return True
        if sub.data == "relation_in" and not _literal(sub.children[0]):
            return True
    return False


def _names_read(tree: lark.Tree[Any]) -> frozenset[str] | None:
    """The identifiers and string literals of a selector: a device attribute or capacity
    it can read is among them. None when it may read a whole map (a size() or a macro
    over it) or an entry by a computed name, so nothing can be left out of its view of a
    device."""
    if _called(tree) & (_MACROS - {"has"} | {"size"}) or _computed_name(tree):
        return None
    names = set()
    for token in tree.scan_values(lambda v: isinstance(v, lark.Token)):
        text = str(token)
        if token.type in ("STRING_LIT", "MLSTRING_LIT"):
            if "\\" in text:
                return None  # an escape spells a name other than its source text
            text = text.lstrip("rRbB").strip("\"'")
        names.add(text)
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class Compiled:
    expression: str
    program: budget.MeteredRunner
    conjuncts: tuple[str, ...]
    reads: frozenset[str] | None  # see _names_read

    def view(self, device: Device) -> object:
        """What of the device the selector can see: devices alike in that get one verdict
        (eight GPUs of a node differ only in their index)."""
        if self.reads is None:
            return device
        reads = self.reads
        return (tuple(kv for kv in device.attributes if kv[0].rpartition("/")[2] in reads),
                tuple(kv for kv in device.capacity if kv[0].rpartition("/")[2] in reads))


class CelEnvironment:
    """Compiles selectors once and remembers each one's verdict per device."""

    def __init__(self, parse_quantity: ParseQuantity = parse_milli) -> None:
        self._env = celpy.Environment()
        self._functions = _library(parse_quantity)
        self._known = (set(celpy.evaluation.base_functions) | set(self._functions)
                       | _MACROS)
        self._compiled: dict[str, Compiled] = {}
        # Each verdict with the steps it took: a request is charged them again when it
        # reads the verdict remembered (budget.request_budget), so what it may spend does
        # not depend on what other requests evaluated before it.
        self._verdicts: dict[tuple[str, str, object], tuple[Verdict, int]] = {}
        self._activations: dict[tuple[str, Device], Mapping[str, Any]] = {}
        self._over_budget: dict[bytes, str] = {}  # see _MAX_OVER_BUDGET
        self._lock = threading.Lock()

    def compile(self, expression: str) -> Compiled:
        """The compiled selector; `UnsupportedSelector` when it cannot be judged."""
        found = self._compiled.get(expression)
        if found is not None:
            return found
        try:
            compiled = self._compile(expression)
        except RecursionError as err:  # the limits should make this unreachable
            raise SelectorOverLimit(expression, "nests too deep to evaluate") from err
        with self._lock:
            if len(self._compiled) >= _MAX_REMEMBERED:
                self._compiled.clear()
            self._compiled[expression] = compiled
        return compiled

    def _compile(self, expression: str) -> Compiled:
        try:
            tree = _parsed(self._env, expression)
        except CELParseError as err:
            where = " ".join(str(err).split())
            raise UnsupportedSelector(expression, f"does not parse ({where})") from err
        unknown = sorted(_called(tree) - self._known)
        if unknown:
            raise UnsupportedSelector(
                expression, f"uses {', '.join(unknown)}, which allset does not evaluate")
        program = budget.MeteredRunner(self._env, tree, self._functions)
        return Compiled(expression, program, tuple(_conjuncts(tree, expression)),
                        _names_read(tree))

    def check(self, expression: str) -> None:
        """Raises UnsupportedSelector for a selector that cannot be judged, or that ran out
        of its evaluation budget before (on any device)."""
        self.compile(expression)
        why = self._over_budget.get(_digest(expression))
        if why is not None:
            raise SelectorOverLimit(expression, why)

    def over_budget(self, expression: str) -> str | None:
        """Why the selector is refused, if an evaluation of it ran out of its budget."""
        return self._over_budget.get(_digest(expression))

    def evaluate(self, expression: str, driver: str, device: Device) -> Verdict:
        """The selector's verdict on the device; SelectorOverLimit when it takes more than
        limits.MAX_STEPS (then and from then on, on every device); RequestOverBudget when
        the request being judged (budget.request_budget) has spent its steps."""
        self.check(expression)
        compiled = self.compile(expression)
        key = (expression, driver, compiled.view(device))
        found = self._verdicts.get(key)
        if found is not None:
            budget.charge(found[1], key)
            return found[0]
        allowed = budget.allowed()
        run = budget.Meter(allowed)
        verdict: Verdict
        try:
            result = compiled.program.evaluate(self._activation(driver, device), run)
        except budget.OverBudget:
            if allowed < limits.MAX_STEPS:
                budget.charge(allowed + 1, key)  # the request's steps ran out, not its own
            why = limits.over_budget(device.name)
            with self._lock:
                if len(self._over_budget) >= _MAX_OVER_BUDGET:
                    self._over_budget.clear()  # each found again, within its budget
                self._over_budget[_digest(expression)] = why
            raise SelectorOverLimit(expression, why) from None
        except (CELEvalError, ValueError, TypeError, ArithmeticError) as err:
            verdict = _error_text(err)
        except RecursionError:  # within the limits it is not reached: never a crash
            verdict = "nests too deep to evaluate"
        else:
            if isinstance(result, celtypes.BoolType):
                verdict = bool(result)
            else:
                verdict = f"evaluates to {type(result).__name__}, not a bool"
        steps = allowed - run.left
        with self._lock:
            if len(self._verdicts) >= _MAX_REMEMBERED:
                self._verdicts.clear()  # a long-lived process sees many selectors
                self._activations.clear()
            self._verdicts[key] = (verdict, steps)
        budget.charge(steps, key)
        return verdict

    def failing_terms(self, expression: str, driver: str, device: Device) -> list[str]:
        """The `&&` terms of a selector that do not hold for the device, with the values
        they read ("memory 80Gi >= 96Gi is false")."""
        out = []
        for term in self.compile(expression).conjuncts:
            verdict = self.evaluate(term, driver, device)
            if verdict is not True:
                out.append(term_summary(term, verdict, driver, device))
        return out

    def _activation(self, driver: str, device: Device) -> Mapping[str, Any]:
        key = (driver, device)
        found = self._activations.get(key)
        if found is None:
            found = {"device": _device_value(driver, device)}
            self._activations[key] = found
        return found


def _digest(expression: str) -> bytes:
    return hashlib.blake2b(expression.encode(), digest_size=16).digest()


def _error_text(err: Exception) -> str:
    args = err.args
    text = str(args[0]) if args else str(err)
    return text.split(" (in activation")[0]


def _cel(value: AttrValue) -> celtypes.Value:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, Version):
        return _semver(value)
    return celtypes.StringType(value)


def _device_value(driver: str, device: Device) -> celtypes.MapType:
    attributes: dict[str, dict[str, celtypes.Value]] = {}
    for name, value in device.attributes:
        domain, _, short = name.rpartition("/")
        attributes.setdefault(domain, {})[short] = _cel(value)
    capacity: dict[str, dict[str, celtypes.Value]] = {}
    for name, amount in device.capacity:
        domain, _, short = name.rpartition("/")
        capacity.setdefault(domain, {})[short] = CelQuantity(amount)

    def nested(d: dict[str, dict[str, celtypes.Value]]) -> celtypes.MapType:
        return celtypes.MapType({
            celtypes.StringType(k): celtypes.MapType(
                {celtypes.StringType(n): v for n, v in inner.items()})
            for k, inner in d.items()})

    return celtypes.MapType({
        celtypes.StringType("driver"): celtypes.StringType(driver),
        celtypes.StringType("attributes"): nested(attributes),
        celtypes.StringType("capacity"): nested(capacity),
        celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(False),
    })


