"""tiles/abi.py against the C it mirrors: every enumerator and integer ``#define`` of native/*.h, and the
runtime's op codes in tile_runtime.c, has a constant of the same value in abi.py, and abi.py has no
code the C lacks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pathweave.tiles import abi

NATIVE = Path(abi.__file__).parent / "native"
#: tile_runtime.c's own codes that Python writes (the op per tile, the depth columns)
RUNTIME_CODES = ("PW_OP_TEST", "PW_OP_LAYER", "PW_MAX_COLS")
#: C names whose Python names are not the C name without ``PW_``
RENAMED = {"PW_MR": "PANEL_ROWS", "PW_TR": "PANEL_ROWS_T", "PW_MAX_COLS": "MAX_COLUMNS"}


def _source(path: Path) -> str:
    """The C text without comments."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", path.read_text(), flags=re.S)


def _enums(text: str, known: dict[str, int]) -> dict[str, int]:
    """Every enumerator of every enum in ``text``: explicit values (an int, or a name defined earlier here
    or in ``known``, the headers read before) and implicit ones (the previous value plus one)."""
    found: dict[str, int] = {}
    for body in re.findall(r"\benum\s*\w*\s*\{([^}]*)\}", text):
        value = -1
        for item in (i.strip() for i in body.split(",")):
            if not item:
                continue
            name, _, expr = (part.strip() for part in item.partition("="))
            if not expr:
                value += 1
            elif re.fullmatch(r"-?\d+", expr):
                value = int(expr)
            else:
                value = {**known, **found}[expr]
            found[name] = value
    return found


def _defines(text: str) -> dict[str, int]:
    return {name: int(v) for name, v in re.findall(r"^\s*#define\s+(PW_\w+)\s+(-?\d+)\s*$", text, re.M)}


def c_codes() -> dict[str, int]:
    """The C's codes by their C names."""
    codes: dict[str, int] = {}
    for header in sorted(NATIVE.glob("*.h")):
        text = _source(header)
        codes.update(_enums(text, codes))
        codes.update(_defines(text))
    runtime = _defines(_source(NATIVE / "tile_runtime.c"))
    codes.update({name: runtime[name] for name in RUNTIME_CODES})
    return codes


def python_name(c_name: str) -> str:
    return RENAMED.get(c_name, c_name.removeprefix("PW_"))


def python_codes() -> dict[str, int]:
    return {
        name: value
        for name, value in vars(abi).items()
        if name.isupper() and isinstance(value, int) and not isinstance(value, bool)
    }


def test_the_parser_reads_the_headers() -> None:
    codes = c_codes()
    assert codes["S_OP"] == 0 and codes["S_KW"] == 29 and codes["S_GROUPS"] == 36  # implicit values
    assert codes["SQ_Z"] == codes["S_W"] and codes["PW_K_COPY"] == 39 and codes["PW_SLOTS"] == 48
    assert len(codes) >= 80


@pytest.mark.parametrize("c_name", sorted(c_codes()))
def test_every_c_code_is_in_abi_with_its_value(c_name: str) -> None:
    ours = python_codes()
    name = python_name(c_name)
    assert name in ours, f"{c_name} has no constant {name} in pathweave/tiles/abi.py"
    assert ours[name] == c_codes()[c_name], f"{name} = {ours[name]}, but {c_name} = {c_codes()[c_name]}"


def test_abi_has_no_code_the_c_lacks() -> None:
    mirrored = {python_name(n) for n in c_codes()}
    assert sorted(set(python_codes()) - mirrored) == []


def test_the_name_tables_use_the_codes() -> None:
    packs = {abi.PACK_PANELS, abi.PACK_TRANSPOSED, abi.PACK_PADDED, abi.PACK_WINOGRAD, abi.PACK_BLOCKED}
    assert set(abi.PACKS.values()) == packs
    assert abi.SEQ_ACTS["gelu_tanh"] == abi.ACT_GELU_TANH and abi.ACTS["sigmoid"] == abi.ACT_SIGMOID
    binops = [abi.BIN_ADD, abi.BIN_SUB, abi.BIN_MUL, abi.BIN_DIV, abi.BIN_RSUB, abi.BIN_MAX, abi.BIN_MIN]
    assert sorted(abi.BINOPS.values()) == binops
    assert set(abi.MATHS.values()) == set(range(abi.ACT_NEG, abi.ACT_SIGN + 1))
    assert sorted(abi.DTYPES.values()) == [abi.DT_F32, abi.DT_I64, abi.DT_I32, abi.DT_U8]
