"""Writes docs/onnx_ops.md: per ONNX op type, the backend node tests pathweave passes against the ones
ONNX Runtime passes, on the same cases with the same comparison.

Not part of the package. The cases are the installed ``onnx`` wheel's node tests
(``tests/frontend/onnx_cases.py``). pathweave runs each through ``pathweave.optimize(path, *inputs,
strategy="sequential")`` with its ONNX Runtime cross-check off (as the node-suite test module does);
ONNX Runtime runs each model as an ``InferenceSession`` on the CPU provider. Both are judged by
``onnx_cases.difference`` (dtype, shape, NaN positions, per-dtype tolerance). A case's op is its one
node's op type; an ``*_expanded`` case (the op's function body) counts under its op, in its own column.

Run: ``python experiments/onnx_ops_table.py [--out docs/onnx_ops.md] [--json /tmp/onnx_ops.json]``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's pathweave and tests

from tests.frontend.onnx_cases import as_array, difference, node_cases, run_case  # noqa: E402

#: ONNX Runtime's Python API cannot hand these dtypes in or out (its kernels may have them): such a case is
#: counted apart, not as a failure of ONNX Runtime
API_LIMITS = ("No corresponding Numpy type", "can't be converted to MLDataType", "Unable to handle object")
EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


def ort_case(case: Any) -> str:
    """ "pass", or why ONNX Runtime does not run the case or returns something else."""
    import onnxruntime as ort

    inputs, outputs = case.data_sets[0]
    try:
        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        sess = ort.InferenceSession(case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        feed = {n: _feed(as_array(v)) for n, v in zip(names, inputs, strict=False)}
        with np.errstate(all="ignore"):
            got = sess.run(None, feed)
    except Exception as exc:
        if any(m in str(exc) for m in API_LIMITS):
            return f"api: {str(exc).splitlines()[0][:160]}"
        return f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    if len(got) != len(outputs):
        return f"wrong: {len(got)} outputs, expected {len(outputs)}"
    for i, (g, w) in enumerate(zip(got, outputs, strict=True)):
        if not isinstance(g, np.ndarray):
            return "pass" if _same_seq(g, w) else f"wrong: output {i} is a {type(g).__name__}"
        want = as_array(w)
        if isinstance(want, np.ndarray) and g.dtype != want.dtype and g.dtype.itemsize == want.dtype.itemsize:
            g = g.view(want.dtype)  # float8 and the like come back as their storage integers
        try:
            tensor = torch.from_numpy(g if g.flags.c_contiguous else g.copy())
        except TypeError:  # strings and other dtypes torch lacks: compare in numpy
            return "pass" if np.array_equal(g, as_array(w)) else f"wrong: output {i} differs"
        problem = difference(tensor, as_array(w))
        if problem:
            return f"wrong: output {i}: {problem}"
    return "pass"


def _feed(value: Any) -> Any:
    """A numpy scalar as a 0-d array; an ml_dtypes array (float8, bfloat16...) as an OrtValue of its ONNX
    type, which numpy feeding cannot express."""
    import onnxruntime as ort
    from onnx.helper import np_dtype_to_tensor_dtype

    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "V":
        storage = value.view(f"uint{8 * value.dtype.itemsize}") if value.dtype.itemsize in (1, 2) else value
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(storage, np_dtype_to_tensor_dtype(value.dtype))
    return value


def _same_seq(got: Any, want: Any) -> bool:
    """Sequences and optionals (ORT returns lists / None) element by element."""
    if got is None or want is None:
        return got is None and want is None
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        return all(
            np.array_equal(np.asarray(g), as_array(w), equal_nan=True) for g, w in zip(got, want, strict=True)
        )
    return False


def op_of(case: Any, ops: dict[str, str]) -> tuple[str, bool]:
    """The case's op type and whether it is a function expansion."""
    base = EXPANDED.sub("", case.name)
    if base != case.name:
        return ops.get(base, base.removeprefix("test_")), True
    return case.model.graph.node[0].op_type, False


def collect() -> dict[str, dict[str, list[str]]]:
    """{op: {"pw": [...outcome kinds], "ort": [...], "pw_x": [...], "ort_x": [...]}} over every case."""
    cases = node_cases()
    ops = {c.name: c.model.graph.node[0].op_type for c in cases if not EXPANDED.search(c.name)}
    table: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in cases:
            op, expanded = op_of(case, ops)
            suffix = "_x" if expanded else ""
            table[op]["pw" + suffix].append(run_case(case, Path(tmp)).kind)
            table[op]["ort" + suffix].append(ort_case(case))
    return table


def _frac(kinds: list[str]) -> str:
    return f"{sum(k == 'pass' for k in kinds)}/{len(kinds)}" if kinds else ""


def render(table: dict[str, dict[str, list[str]]]) -> str:
    import onnx
    import onnxruntime

    def count(key: str) -> tuple[int, int]:
        kinds = [k for row in table.values() for k in row.get(key, [])]
        return sum(k == "pass" for k in kinds), len(kinds)

    pw, total = (a + b for a, b in zip(count("pw"), count("pw_x"), strict=True))
    ort_pass = count("ort")[0] + count("ort_x")[0]
    ort_api = sum(
        k.startswith("api") for row in table.values() for key in ("ort", "ort_x") for k in row.get(key, [])
    )
    pw_kinds = [k for row in table.values() for key in ("pw", "pw_x") for k in row.get(key, [])]
    bad = {k: pw_kinds.count(k) for k in ("raw", "wrong")}
    both_full = sum(1 for r in table.values() if _full(r, "pw"))
    ort_full = sum(1 for r in table.values() if _full(r, "ort"))
    lines = [
        "# ONNX op coverage: pathweave against ONNX Runtime on the backend node tests",
        "",
        f"Generated by `python experiments/onnx_ops_table.py` (onnx {onnx.__version__}, onnxruntime "
        f"{onnxruntime.__version__}, {total} cases of `onnx.backend.test.case.node.collect_testcases()`).",
        'pathweave: `pathweave.optimize(path, *inputs, strategy="sequential")`, its ONNX Runtime '
        "cross-check off; ONNX Runtime: an `InferenceSession` on the CPU provider. Both judged alike (dtype, "
        "shape, NaN positions, per-dtype tolerance: `tests/frontend/onnx_cases.py`). A pathweave case that "
        "does not pass is refused with a pathweave error naming the node "
        f"(raw exceptions: {bad['raw']}, wrong results: {bad['wrong']}); an ONNX Runtime case that does not "
        "pass raised an error (mostly NOT_IMPLEMENTED: an op, dtype or opset it lacks) or returned another "
        f"result; {ort_api} cases (float8, bfloat16, int4/int2 values) cannot be handed to or read from "
        "ONNX Runtime's Python API with numpy and count as not passing there. "
        "*Expanded*: the same tests run on the op's function body.",
        "",
        f"**Totals: pathweave {pw}/{total}, ONNX Runtime {ort_pass}/{total}; op types passing every case: "
        f"pathweave {both_full}, ONNX Runtime {ort_full} of {len(table)}.**",
        "",
        "| op | pathweave | ONNX Runtime | pathweave, expanded | ONNX Runtime, expanded |",
        "|---|---|---|---|---|",
    ]
    for op in sorted(table, key=str.lower):
        r = table[op]
        lines.append(
            f"| {op} | {_frac(r['pw'])} | {_frac(r['ort'])} | {_frac(r['pw_x'])} | {_frac(r['ort_x'])} |"
        )
    return "\n".join(lines) + "\n"


def _full(row: dict[str, list[str]], who: str) -> bool:
    kinds = row.get(who, []) + row.get(who + "_x", [])
    return bool(kinds) and all(k == "pass" for k in kinds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" / "onnx_ops.md"))
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    import os

    os.environ["PATHWEAVE_ONNX_CROSSCHECK"] = "0"
    table = collect()
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))
    text = render(table)
    Path(args.out).write_text(text)
    print(text.split("\n\n")[2])


if __name__ == "__main__":
    main()
