"""The program JSON of a ``.pt2`` archive (``models/<name>.json``), checked and cleaned before torch reads it.

torch's loader turns parts of that JSON into Python source or evaluates them: node and input names go
into the generated ``forward`` (a name like ``x=__import__('os')...`` runs at definition), parameter
names into ``getattr(self, "...")`` strings, size expressions through ``sympy.sympify`` (which
evaluates), guard strings into generated checks, and node targets are looked up on ``torch`` (a target
``torch.load`` would be called with the graph's constant arguments). So every name must be a dotted
identifier, every node target an operator (``torch.ops.*``, ``_operator.*``, ``math.*`` or torch's
``sym_*``), and size expressions may hold only sympy's constructors of integers, symbols and the
arithmetic torch uses. Node metadata (stack traces, module paths) and guard strings are dropped: torch
only prints the first and pathweave re-specialises programs to the inputs it is given.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..errors import InputError

_NAME = re.compile(r"[A-Za-z0-9_.]*")
_TARGET = re.compile(r"torch\.ops\.(aten|prims|higher_order|quantized_decomposed)\.\w+(\.\w+)?"
                     r"|_operator\.\w+|math\.\w+|torch\._?sym_\w+")
#: ATen ops that read or write files by name (found by scanning every ATen schema for such arguments)
_FILE_OPS = re.compile(r"\bfrom_file\b|aten[.:]+save\b")
#: pytree node types a program's input and output specs may name; their contexts are plain JSON
_SPEC_TYPES = frozenset({None, "builtins.tuple", "builtins.list", "builtins.dict", "collections.OrderedDict"})
#: the most bytes one value of the program may take (its shapes are in the JSON; a 5 KB file asked for
#: ``ones([2**31])``)
MAX_VALUE_BYTES = 4 << 30
_EXPR_TOKEN = re.compile(r"\s+|'[A-Za-z]+\d*'|\d{1,18}(\.\d{1,18})?|[A-Za-z_]\w*|//|[-+*/%(),=<>!]=?|[<>]")
_SYMBOL = re.compile(r"[a-z]+\d+")
#: words a size expression may hold: sympy's and torch's constructors and assumptions, nothing else
_EXPR_WORDS = frozenset(
    "Symbol Integer Rational Float Add Mul Max Min Abs Mod Eq Ne Lt Le Gt Ge And Or Not true false "
    "True False positive integer nonnegative negative real finite FloorDiv CeilDiv ModularIndexing Where "
    "PythonMod CleanDiv CeilToInt FloorToInt IntTrueDiv FloatTrueDiv TruncToInt TruncToFloat ToFloat "
    "RoundToInt RoundDecimal IsNonOverlappingAndDenseIndicator LShift RShift BitwiseFn_bitwise_and "
    "BitwiseFn_bitwise_or OpaqueUnaryFn_sqrt Identity floor ceiling oo zoo nan".split()
)
#: keys whose strings are data, not names (repr'd into code or parsed as JSON by pytree)
_FREE_TEXT = frozenset({"as_string", "as_strings", "in_spec", "out_spec", "torch_version", "context"})


def clean_program(program: Any, where: str) -> Any:
    """``program`` (the parsed JSON) with metadata and guards dropped, after the checks above; raises
    ``InputError`` naming ``where`` and the offending key."""
    return _walk(program, [], where)


def _walk(value: Any, path: list[str], where: str) -> Any:
    key = path[-1] if path else ""
    if isinstance(value, str) and _FILE_OPS.search(value):
        raise InputError(f"{where}: {'/'.join(path)} names an op that reads or writes files; refused")
    if isinstance(value, dict):
        if key == "tensor_values":
            for name, meta in value.items():
                _check_value_size(meta, path + [name], where)
        if "target" in value and "inputs" in value:  # a graph node: its target is looked up on torch
            _check(_TARGET, value["target"], path + ["target"], where, "an operator")
        out = {}
        for k, v in value.items():
            if k == "metadata" or k == "guards_code":
                out[k] = {} if isinstance(v, dict) else []
                continue
            if key == "range_constraints":
                _check_expr(k, path + [k], where)
            elif key not in _FREE_TEXT:
                _check(_NAME, k, path + [k], where, "a name")
            out[k] = _walk(v, path + [k], where)
        return out
    if isinstance(value, list):
        return [_walk(v, path, where) for v in value]
    if isinstance(value, str):
        if key == "expr_str":
            _check_expr(value, path, where)
        elif key in ("in_spec", "out_spec"):
            _check_spec(value, path, where)
        elif key not in _FREE_TEXT and not (key == "target" and _TARGET.fullmatch(value)):
            _check(_NAME, value, path, where, "a name")
    return value


def _check_spec(text: str, path: list[str], where: str) -> None:
    """An input or output spec: pytree JSON whose node types are plain containers and whose contexts
    are plain JSON (torch's reader imports modules named in ``__enum__`` objects and defaultdict
    factories)."""
    try:
        _protocol, root = json.loads(text)
        stack = [root]
        while stack:
            node = stack.pop()
            if node.get("type") not in _SPEC_TYPES:
                raise ValueError(f"node type {node.get('type')!r}")
            context = node.get("context")
            if context not in (None, "null") and not _plain(json.loads(context)):
                raise ValueError(f"context {context[:60]!r}")
            stack.extend(node.get("children_spec", []))
    except (ValueError, TypeError, AttributeError) as exc:
        raise InputError(
            f"{where}: {'/'.join(path)} is not a plain input/output structure ({exc}); torch's reader "
            "would import what it names, so the file is refused"
        ) from exc


def _plain(value: Any) -> bool:
    """JSON of strings, numbers and lists only (no objects: torch's hook imports from ``__enum__``)."""
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


def _check_value_size(meta: Any, path: list[str], where: str) -> None:
    try:
        dims = [d.get("as_int", d.get("as_expr", {}).get("hint", {}).get("as_int", 0)) for d in meta["sizes"]]
        elements = math.prod(int(d) for d in dims)
    except (KeyError, TypeError, AttributeError, ValueError):
        return  # not a tensor value (or no static size): nothing to bound
    if elements * 8 > MAX_VALUE_BYTES:
        raise InputError(
            f"{where}: {'/'.join(path)} would hold {elements} elements, more than pathweave allows one "
            f"value of a loaded program ({MAX_VALUE_BYTES >> 30} GiB); refused"
        )


def _check(pattern: re.Pattern[str], text: Any, path: list[str], where: str, what: str) -> None:
    if not isinstance(text, str) or not pattern.fullmatch(text):
        raise InputError(
            f"{where}: {'/'.join(path)} = {str(text)[:80]!r} is not {what}; torch would run it as code "
            "when loading, so pathweave refuses the file"
        )


def _check_expr(text: str, path: list[str], where: str) -> None:
    """A size expression as torch writes it (``Mul(Integer(2), Symbol('s27', positive=True))``, ``2*s65``)."""
    pos = 0
    while pos < len(text):
        match = _EXPR_TOKEN.match(text, pos)
        word = match.group(0) if match else ""
        power = word == "*" and text[match.end():].lstrip().startswith("*")  # 9**9**9: minutes of sympy
        if power or not word or (word[0].isalpha() or word[0] == "_") and word not in _EXPR_WORDS and not (
                _SYMBOL.fullmatch(word)):  # fmt: skip
            raise InputError(
                f"{where}: {'/'.join(path)} = {text[:80]!r} is not a size expression pathweave reads "
                f"({word or text[pos:pos + 10]!r}); torch would evaluate it when loading, so the file "
                "is refused"
            )
        pos = match.end()
