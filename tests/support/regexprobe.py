"""Finds regular expressions whose matching time grows faster than the text (issue 42, item 1).

Two halves. :func:`package_patterns` gathers every pattern ibdiag compiles: the compiled patterns
reachable from each module's globals (in lists, dicts, classes too), and the literal patterns of
``re.search(...)``-style calls inside functions, found in the source; a call whose pattern is neither
(built at run time inside a function) is reported so it can be moved where this sees it.

:func:`attacks` builds crafted long texts for one pattern from its own parse tree: for every
repetition, the shortest text that reaches it, then one of the repetition's own texts (each character
class tried with several of its members) repeated, with and without a character that then fails the
match. :func:`growth` times a pattern on such a text at two lengths, by CPU time, best of three, and
stops a run that has already taken far longer than a linear pattern could.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import pkgutil
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import re._constants as C
    import re._parser as P
else:  # pragma: no cover
    import sre_constants as C
    import sre_parse as P

_CALLS = {"compile", "match", "search", "fullmatch", "findall", "finditer", "sub", "subn", "split"}
#: Where the flags argument sits in each function (``re.sub(p, repl, s, count, flags)``).
_FLAGS_AT = {"sub": 4, "subn": 4, "split": 3}


@dataclass(frozen=True)
class Site:
    """One pattern and where ibdiag compiles or applies it (``ibdiag/x.py:12`` or ``ibdiag.x._NAME``)."""

    where: str
    pattern: re.Pattern[Any]


def _walk_value(value: Any, name: str, seen: set[int]) -> Iterator[tuple[str, re.Pattern[Any]]]:
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, re.Pattern):
        yield name, value
    elif isinstance(value, (list, tuple, frozenset, set)):
        for i, item in enumerate(value):
            yield from _walk_value(item, f"{name}[{i}]", seen)
    elif isinstance(value, dict):
        for k, item in value.items():
            yield from _walk_value(item, f"{name}[{k!r}]", seen)
    elif isinstance(value, type) and value.__module__.startswith("ibdiag"):
        for k, item in vars(value).items():
            yield from _walk_value(item, f"{name}.{k}", seen)


def _flags(call: ast.Call) -> int:
    node: ast.expr | None = None
    for kw in call.keywords:
        if kw.arg == "flags":
            node = kw.value
    at = _FLAGS_AT.get(call.func.attr, 2) if isinstance(call.func, ast.Attribute) else 2
    if node is None and len(call.args) > at:
        node = call.args[at]
    if node is None:
        return 0
    return int(eval(compile(ast.Expression(node), "<flags>", "eval"), {"re": re}))


def _inline_sites(path: Path, rel: str) -> tuple[list[Site], list[str]]:
    """Literal patterns of ``re.*`` calls inside functions, and the non-literal ones found there."""
    sites: list[Site] = []
    unseen: list[str] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            func = child.func if isinstance(child, ast.Call) else None
            if (
                isinstance(child, ast.Call)
                and isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "re"
                and func.attr in _CALLS
                and child.args
            ):
                where = f"{rel}:{child.lineno}"
                try:
                    text = ast.literal_eval(child.args[0])
                except ValueError:
                    if inner:
                        unseen.append(where)
                else:
                    if inner:
                        sites.append(Site(where, re.compile(text, _flags(child))))
            visit(child, inner)

    visit(tree, False)
    return sites, unseen


def package_patterns(
    package: str = "ibdiag", skip: tuple[str, ...] = ()
) -> tuple[list[Site], list[str]]:
    """Every pattern of ``package`` (modules under ``skip`` left out), and the calls this cannot see."""
    root_module = importlib.import_module(package)
    root = Path(root_module.__file__ or "").parent
    sites: list[Site] = []
    unseen: list[str] = []
    seen: set[int] = set()
    for info in pkgutil.walk_packages([str(root)], prefix=f"{package}."):
        if info.name.startswith(skip):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, type(sys)):
                continue
            if isinstance(value, type) and value.__module__ != info.name:
                continue
            for where, pattern in _walk_value(value, f"{info.name}.{name}", seen):
                sites.append(Site(where, pattern))
        path = Path(module.__file__ or "")
        rel = path.relative_to(root.parent).as_posix()
        inline, blind = _inline_sites(path, rel)
        sites.extend(inline)
        unseen.extend(blind)
    return sites, unseen


# -- crafted texts from a pattern's parse tree --------------------------------------------------

_CATEGORY = {
    C.CATEGORY_DIGIT: "0",
    C.CATEGORY_NOT_DIGIT: "a",
    C.CATEGORY_SPACE: " ",
    C.CATEGORY_NOT_SPACE: "a",
    C.CATEGORY_WORD: "a",
    C.CATEGORY_NOT_WORD: " ",
    C.CATEGORY_LINEBREAK: "\n",
    C.CATEGORY_NOT_LINEBREAK: "a",
}
_CATEGORY_MORE = {
    C.CATEGORY_DIGIT: "09",
    C.CATEGORY_NOT_DIGIT: "a :.-",
    C.CATEGORY_SPACE: " \t",
    C.CATEGORY_NOT_SPACE: "a0:.-[",
    C.CATEGORY_WORD: "a0_",
    C.CATEGORY_NOT_WORD: " .:-[",
    C.CATEGORY_NOT_LINEBREAK: "a :",
}
_OTHERS = "a :0.-[]\t,"
#: The most alternatives kept at each step (the product of branches grows fast).
_WIDTH = 6
_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", C.MAX_REPEAT))


def _class_members(items: list[tuple[Any, Any]], many: bool) -> list[str]:
    negated = any(op is C.NEGATE for op, _ in items)
    inside: list[str] = []
    for op, av in items:
        if op is C.LITERAL:
            inside.append(chr(av))
        elif op is C.RANGE:
            lo, hi = av
            inside += [chr(lo), chr(hi)] if many else [chr(lo)]
        elif op is C.CATEGORY:
            inside += list(_CATEGORY_MORE.get(av, "") if many else _CATEGORY.get(av, ""))
    if negated:
        pool = [c for c in _OTHERS if not re.fullmatch(_class_regex(items), c)]
        return pool if many else pool[:1]
    return list(dict.fromkeys(inside)) or ["a"]


def _class_regex(items: list[tuple[Any, Any]]) -> str:
    # Rebuilt only to test membership of a few characters: the class's own pattern text.
    return "[" + "".join(_item_text(op, av) for op, av in items) + "]"


def _item_text(op: Any, av: Any) -> str:
    if op is C.NEGATE:
        return "^"
    if op is C.LITERAL:
        return re.escape(chr(av))
    if op is C.RANGE:
        return f"{re.escape(chr(av[0]))}-{re.escape(chr(av[1]))}"
    if op is C.CATEGORY:
        return {
            C.CATEGORY_DIGIT: r"\d",
            C.CATEGORY_NOT_DIGIT: r"\D",
            C.CATEGORY_SPACE: r"\s",
            C.CATEGORY_NOT_SPACE: r"\S",
            C.CATEGORY_WORD: r"\w",
            C.CATEGORY_NOT_WORD: r"\W",
        }.get(av, "")
    return ""


def _texts(seq: Any, many: bool) -> list[str]:
    """Texts matching the sequence ``seq`` once, shortest choices; ``many``: vary every class."""
    out = [""]
    for op, av in seq:
        alts = _node_texts(op, av, many)
        out = list(dict.fromkeys(a + b for a, b in itertools.product(out, alts)))[:_WIDTH]
    return out


def _node_texts(op: Any, av: Any, many: bool) -> list[str]:
    if op is C.LITERAL:
        return [chr(av)]
    if op is C.NOT_LITERAL:
        return ["a" if chr(av) != "a" else "b"]
    if op is C.ANY:
        return ["a", ":"] if many else ["a"]
    if op is C.IN:
        return _class_members(av, many)
    if op is C.BRANCH:
        return [t for alt in av[1] for t in _texts(alt, many)][: _WIDTH * 2]
    if op is C.SUBPATTERN:
        return _texts(av[-1], many)
    if op is getattr(C, "ATOMIC_GROUP", None):
        return _texts(av, many)
    if op in _REPEATS:
        lo, _hi, body = av
        return [t * lo for t in _texts(body, many)] if lo else [""]
    return [""]  # anchors, lookarounds, group references, conditionals


def _pumps(seq: Any, before: list[str]) -> Iterator[tuple[str, str]]:
    """(text before, text repeated) for every repetition in ``seq``, nested ones included."""
    for i, (op, av) in enumerate(seq):
        prefixes = [b + t for b in before for t in _texts(seq[:i], many=False)][:_WIDTH]
        if op in _REPEATS:
            lo, hi, body = av
            if hi > 64:
                for pump in _texts(body, many=True):
                    if pump:
                        for pre in prefixes:
                            yield pre, pump
            yield from _pumps(body, prefixes)
        elif op is C.BRANCH:
            for alt in av[1]:
                yield from _pumps(alt, prefixes)
        elif op is C.SUBPATTERN:
            yield from _pumps(av[-1], prefixes)
        elif op is getattr(C, "ATOMIC_GROUP", None):
            yield from _pumps(av, prefixes)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            yield from _pumps(av[1], prefixes)


#: Texts that long lines of logs and tools are made of, tried on every pattern besides its own.
GENERIC = ["a", " ", "0", "a ", "0:", ": ", ", ", "[ ", "a.", "-", "\t", "a=", "x: y ", "0 "]


def attacks(pattern: re.Pattern[Any]) -> list[tuple[str, str, str]]:
    """(prefix, pump, suffix): ``prefix + pump * n + suffix`` are the texts to time."""
    if isinstance(pattern.pattern, bytes):
        tree = P.parse(pattern.pattern.decode("latin-1"), pattern.flags & ~re.LOCALE)
    else:
        tree = P.parse(pattern.pattern, pattern.flags)
    found: dict[tuple[str, str], None] = {}
    for pre, pump in _pumps(list(tree), [""]):
        found.setdefault((pre, pump), None)
        # searched, a text that starts a match again and again costs a scan from each start
        found.setdefault(("", pre + pump), None)
    for filler in GENERIC:
        found.setdefault(("", filler), None)
    return [(pre, pump, end) for pre, pump in found for end in ("", "\x01")]


# -- timing ----------------------------------------------------------------------------------


def _cpu(fn: Callable[[], object], runs: int = 3) -> float:
    """CPU seconds ``fn`` takes, best of ``runs`` (other processes' load does not count)."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def _apply(pattern: re.Pattern[Any], text: Any) -> None:
    pattern.search(text)
    pattern.fullmatch(text)


def growth(
    pattern: re.Pattern[Any],
    prefix: str,
    pump: str,
    suffix: str,
    short: int = 4096,
    factor: int = 8,
) -> tuple[int, float, float] | None:
    """Whether matching ``prefix + pump * n + suffix`` grows faster than the text: None when the
    text ``factor`` times longer than about ``short`` characters is fast anyway (under 20 ms) or
    cost at most 3x its growth (24x for 8x; a quadratic pattern grows 64x), else (times longer,
    CPU seconds short, CPU seconds long). The length doubles from ``short`` and stops at the first
    length that already costs too much, so a quadratic or cubic pattern is caught in seconds."""
    reps = max(1, short // len(pump))

    def text(n: int) -> Any:
        s = prefix + pump * n + suffix
        return s.encode("latin-1") if isinstance(pattern.pattern, bytes) else s

    brief = text(reps)
    t_short = _cpu(lambda: _apply(pattern, brief), runs=1)
    t_long: float | None = None
    if t_short * factor * 3 < 0.02:  # even a cubic pattern costs little to try at full length
        longest = text(reps * factor)
        t_long = _cpu(lambda: _apply(pattern, longest), runs=1)
        if t_long < 0.02:
            return None
    t_short = max(_cpu(lambda: _apply(pattern, brief)), 1e-4)
    if t_long is not None and t_long < 3 * factor * t_short:
        return None
    times = 2
    while times <= factor:
        longer = text(reps * times)
        t = _cpu(lambda s=longer: _apply(pattern, s), runs=1)
        if t >= 0.02 and t > 3 * times * t_short:
            t = _cpu(lambda s=longer: _apply(pattern, s), runs=2)  # best of three, with the first
            if t >= 0.02 and t > 3 * times * t_short:
                return times, t_short, t
        times *= 2
    return None
