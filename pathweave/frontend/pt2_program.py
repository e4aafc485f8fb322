"""The program JSON of a ``.pt2`` archive (``models/<name>.json``), checked and cleaned before torch reads it.

torch's loader turns parts of that JSON into Python source or evaluates them: node and input names go
into the generated ``forward`` (a name like ``x=__import__('os')...`` runs at definition), parameter
names into ``getattr(self, "...")`` strings, size expressions through ``sympy.sympify`` (which
evaluates), guard strings into generated checks, and node targets are looked up on ``torch`` (a target
``torch.load`` would be called with the graph's constant arguments). So every name must be a dotted
identifier, every node target an operator (ATen's public ops and a listed few private ones, cond, map
and invoke_subgraph, ``quantized_decomposed``, ``_operator.*``, ``math.*`` or torch's ``sym_*``; no
``prims``, whose views check no bounds), and size expressions may hold only sympy's constructors of
integers, symbols and the arithmetic torch uses. Node metadata (stack traces, module paths) and guard
strings are dropped: torch only prints the first and pathweave re-specialises programs to the inputs
it is given.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pathweave.errors import InputError

#: what a name in a program may be (torch writes names into generated source)
NAME = re.compile(r"[A-Za-z0-9_.]*")
_TARGET = re.compile(
    r"torch\.ops\.(aten|higher_order|quantized_decomposed)\.\w+(\.\w+)?"
    r"|_operator\.\w+|math\.\w+|torch\._?sym_\w+"
)
#: ATen ops that read or write files by name (found by scanning every ATen schema for such arguments)
_FILE_OPS = re.compile(r"\bfrom_file\b|aten[.:]+save\b")
#: private ATen ops a program may call (the others include views without bounds checks, such as
#: ``_reshape_alias``: a fourth hostile review read and wrote memory outside a tensor with it)
_PRIVATE_OK = frozenset(
    "_assert_tensor_metadata _assert_scalar _assert_async _functional_assert_async _to_copy _softmax "
    "_log_softmax _safe_softmax _native_batch_norm_legit_no_training _native_batch_norm_legit "
    "_native_batch_norm_legit_functional _scaled_dot_product_flash_attention_for_cpu "
    "_scaled_dot_product_efficient_attention _scaled_dot_product_flash_attention _unsafe_view "
    "_adaptive_avg_pool2d _prelu_kernel _upsample_bilinear2d_aa _upsample_nearest_exact2d "
    "_local_scalar_dense _make_dep_token _weight_norm_interface _weight_norm _cdist_forward "
    "_upsample_bicubic2d_aa _upsample_nearest_exact1d _upsample_nearest_exact3d _adaptive_avg_pool3d "
    # Python's bitwise operators on tensors (Llama's and Qwen2's masks): element-wise, bounded
    "__and__ __or__ __xor__ __lshift__ __rshift__ __iand__ __ior__ __ixor__ __ilshift__ __irshift__".split()
)
#: ops that write through raw storage, or call other ops or loop without bound
_DENIED = frozenset(
    {
        "set_",
        "as_strided_",
        "resize_",
        "resize_as_",
        "resize",
        "resize_as",
        "embedding_bag",
        "_embedding_bag",
        "_embedding_bag_forward_only",
    }
)  # negative offsets read anywhere
_HIGHER_ORDER_OK = frozenset({"cond", "map_impl", "invoke_subgraph"})
#: pytree node types a program's input and output specs may name; their contexts are plain JSON
_SPEC_TYPES = frozenset({None, "builtins.tuple", "builtins.list", "builtins.dict", "collections.OrderedDict"})
#: the most bytes one value of the program may take (its shapes are in the JSON; a 5 KB file asked for
#: ``ones([2**31])``)
MAX_VALUE_BYTES = 4 << 30
_EXPR_TOKEN = re.compile(r"\s+|'[A-Za-z]+\d*'|\d{1,18}(\.\d{1,18})?|[A-Za-z_]\w*|//|[-+*/%(),=<>!]=?|[<>]")
_SYMBOL = re.compile(r"[a-z]+\d+")
#: words a size expression may hold: sympy's and torch's constructors and assumptions, nothing else
_EXPR_WORDS = frozenset(
    "GreaterThan StrictGreaterThan LessThan StrictLessThan Equality Unequality "
    "Symbol Integer Rational Float Add Mul Max Min Abs Mod Eq Ne Lt Le Gt Ge And Or Not true false "
    "True False positive integer nonnegative negative real finite FloorDiv CeilDiv ModularIndexing Where "
    "PythonMod CleanDiv CeilToInt FloorToInt IntTrueDiv FloatTrueDiv TruncToInt TruncToFloat ToFloat "
    "RoundToInt RoundDecimal IsNonOverlappingAndDenseIndicator LShift RShift BitwiseFn_bitwise_and "
    "BitwiseFn_bitwise_or OpaqueUnaryFn_sqrt Identity floor ceiling oo zoo nan".split()
)
#: how torch's serializer writes the floats JSON has no literal for (``as_float``, ``as_floats``)
_NONFINITE = frozenset({"Infinity", "-Infinity", "NaN"})
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
        return _walk_dict(value, key, path, where)
    if isinstance(value, list):
        return [_walk(v, path, where) for v in value]
    if isinstance(value, str):
        if key == "expr_str":
            _check_expr(value, path, where)
        elif key in ("in_spec", "out_spec"):
            _check_spec(value, path, where)
        elif key in ("as_float", "as_floats") and value in _NONFINITE:
            pass  # -inf masks, NaN fills: torch reads these three words back as floats
        elif key not in _FREE_TEXT and not (key == "target" and _TARGET.fullmatch(value)):
            _check(NAME, value, path, where, "a name")
    return value


def _walk_dict(value: dict, key: str, path: list[str], where: str) -> dict:
    """A JSON object under ``key``: its ops and sizes checked, its keys checked as names or expressions."""
    if key == "tensor_values":
        for name, meta in value.items():
            _check_value_size(meta, path + [name], where)
    if "target" in value and "inputs" in value:  # a graph node: its target is looked up on torch
        _check_op(value["target"], path + ["target"], where)
    if "as_operator" in value:  # an op handed to another (wrap, with_effects): the same rules
        _check_op(value["as_operator"], path + ["as_operator"], where)
    out = {}
    for k, v in value.items():
        if k == "metadata" or k == "guards_code":
            out[k] = {} if isinstance(v, dict) else []
            continue
        if key == "range_constraints":
            _check_expr(k, path + [k], where)
        elif key not in _FREE_TEXT:
            _check(NAME, k, path + [k], where, "a name")
        out[k] = _walk(v, path + [k], where)
    return out


def check_op(target: Any, where: str) -> None:
    """Raise ``InputError`` unless ``target`` names an operator a program read from a file may call."""
    if isinstance(target, str) and _FILE_OPS.search(target):
        raise InputError(f"{where}: {target!r} names an op that reads or writes files; refused")
    _check_op(target, [], where)


def _check_op(target: Any, path: list[str], where: str) -> None:
    _check(_TARGET, target, path, where, "an operator")
    parts = target.split(".")
    if parts[0] != "torch" or len(parts) < 4:
        return  # _operator.*, math.*, torch.sym_*
    namespace, name = parts[2], parts[3]
    refused = (
        name in _DENIED
        or (namespace == "aten" and name.startswith("_") and name not in _PRIVATE_OK)
        or (namespace == "higher_order" and name not in _HIGHER_ORDER_OK)
    )
    if refused:
        raise InputError(
            f"{where}: {'/'.join(path)} = {target!r} is an op pathweave does not run from a file (raw "
            "memory, or one that calls other ops); refused"
        )


def check_spec(text: Any, where: str) -> None:
    """Raise ``InputError`` unless ``text`` is a plain pytree input/output spec (``_check_spec``)."""
    if not isinstance(text, str):
        raise InputError(f"{where}: not a pytree spec")
    _check_spec(text, [], where)


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
        power = word == "*" and text[match.end() :].lstrip().startswith("*")  # 9**9**9: minutes of sympy
        if power or not word or (word[0].isalpha() or word[0] == "_") and word not in _EXPR_WORDS and not (
                _SYMBOL.fullmatch(word)):  # fmt: skip
            raise InputError(
                f"{where}: {'/'.join(path)} = {text[:80]!r} is not a size expression pathweave reads "
                f"({word or text[pos : pos + 10]!r}); torch would evaluate it when loading, so the file "
                "is refused"
            )
        pos = match.end()
