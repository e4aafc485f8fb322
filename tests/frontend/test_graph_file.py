"""A saved graph read back as data: whatever a crafted file holds is an InputError, never a raw one."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from pathweave.errors import InputError
from pathweave.frontend.capture import capture
from pathweave.frontend.graph_file import decode_graph, encode_graph


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.w)


@pytest.fixture(scope="module")
def encoded() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    return encode_graph(capture(_Net(), torch.randn(2, 3)).gm, "t")


def test_round_trip_computes_the_same(encoded) -> None:
    data, consts = encoded
    gm = decode_graph(copy.deepcopy(data), consts, "Net", "f")
    x = torch.randn(2, 3)
    want = torch.relu(x @ consts[next(iter(consts))])
    got = gm(x)
    torch.testing.assert_close(got[0] if isinstance(got, (tuple, list)) else got, want)


@pytest.mark.parametrize("name", ["import", "forward", "__class__", "training"])
def test_a_constant_named_like_python_or_a_module_attribute_is_refused(encoded, name: str) -> None:
    data, consts = copy.deepcopy(encoded[0]), {}
    for node in data["nodes"]:
        if node["op"] == "get_attr":
            consts = {name: encoded[1][node["target"]]}
            node["target"] = name
    with pytest.raises(InputError, match="keyword or a module attribute"):
        decode_graph(data, consts, "Net", "f")


def _edit(data: dict[str, Any], how: str) -> None:
    nodes = data["nodes"]
    if how == "no output":
        del nodes[-1]
    elif how == "two outputs":
        nodes.insert(0, dict(nodes[-1], name="out0"))
    elif how == "tuple of text":
        nodes[2]["args"] = {"tuple": "abc"}
    elif how == "list of a number":
        nodes[2]["args"] = {"tuple": [{"list": 5}]}
    elif how == "dict of a list":
        nodes[2]["kwargs"] = {"dict": [1, 2]}
    elif how == "file op":
        nodes[2]["target"] = "torch.ops.aten.save.default"


@pytest.mark.parametrize(
    "how", ["no output", "two outputs", "tuple of text", "list of a number", "dict of a list", "file op"]
)
def test_crafted_graphs_are_input_errors(encoded, how: str) -> None:
    data = copy.deepcopy(encoded[0])
    _edit(data, how)
    with pytest.raises(InputError):
        decode_graph(data, encoded[1], "Net", "f")
