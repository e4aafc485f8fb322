"""The KServe v2 wire format on its own: JSON and binary tensors in, JSON and binary tensors out."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pathweave.serve.protocol import DATATYPES, InferRequest, RequestError, encode_infer, parse_infer


def _binary_body(doc: dict, chunks: list[bytes]) -> tuple[bytes, str]:
    head = json.dumps(doc).encode()
    return head + b"".join(chunks), str(len(head))


@pytest.mark.parametrize("datatype", sorted(DATATYPES))
def test_json_and_binary_inputs_give_the_same_array(datatype: str) -> None:
    rng = np.random.default_rng(3)
    want = (rng.standard_normal((3, 17)) * 50).astype(DATATYPES[datatype])
    doc = {"inputs": [{"name": "x", "shape": [3, 17], "datatype": datatype, "data": want.tolist()}]}
    from_json = parse_infer(json.dumps(doc).encode(), None).inputs["x"]
    spec = {
        "name": "x",
        "shape": [3, 17],
        "datatype": datatype,
        "parameters": {"binary_data_size": want.nbytes},
    }
    body, head = _binary_body({"inputs": [spec]}, [want.tobytes()])
    from_bytes = parse_infer(body, head).inputs["x"]
    np.testing.assert_array_equal(from_json, want)
    np.testing.assert_array_equal(from_bytes, want)
    assert from_json.dtype == from_bytes.dtype == want.dtype


def test_binary_inputs_are_cut_in_order_and_mixed_with_json() -> None:
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(4, dtype=np.int64)
    specs = [
        {"name": "a", "shape": [2, 3], "datatype": "FP32", "parameters": {"binary_data_size": a.nbytes}},
        {"name": "j", "shape": [1], "datatype": "INT32", "data": [7]},
        {"name": "b", "shape": [4], "datatype": "INT64", "parameters": {"binary_data_size": b.nbytes}},
    ]
    body, head = _binary_body({"id": "r1", "inputs": specs}, [a.tobytes(), b.tobytes()])
    got = parse_infer(body, head)
    assert got.id == "r1"
    np.testing.assert_array_equal(got.inputs["a"], a)
    np.testing.assert_array_equal(got.inputs["b"], b)
    assert got.inputs["j"].tolist() == [7]


def _x(**spec: object) -> dict:
    return {"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2], **spec}]}


@pytest.mark.parametrize(
    ("body", "head", "says"),
    [
        (b"{nope", None, "not JSON"),
        (b"[1, 2]", None, "expected an object"),
        (json.dumps({"inputs": []}).encode(), None, "no 'inputs'"),
        (json.dumps(_x(datatype="BF17")).encode(), None, "datatype 'BF17'"),
        (json.dumps(_x(shape=[3])).encode(), None, "2 values in 'data' for shape [3]"),
        (json.dumps(_x(shape=[-2])).encode(), None, "negative size"),
        (json.dumps(_x(shape="2")).encode(), None, "list of integers"),
        (json.dumps(_x(data=["a", "b"])).encode(), None, "does not hold FP32"),
        (json.dumps(_x(data=None) | {"id": 3}).encode(), None, "'id' must be a string"),
        (json.dumps({"inputs": [_x()["inputs"][0]] * 2}).encode(), None, "given twice"),
        (json.dumps(_x(parameters={"binary_data_size": 8})).encode(), "0", "not JSON"),
        (
            json.dumps(_x(parameters={"binary_data_size": 8})).encode(),
            "9999",
            "outside the body",
        ),  # fmt: skip
    ],
)
def test_malformed_requests_are_request_errors(body: bytes, head: str | None, says: str) -> None:
    with pytest.raises(RequestError, match=says.replace("[", r"\[").replace("]", r"\]")) as caught:
        parse_infer(body, head)
    assert caught.value.status == 400


def test_binary_sizes_must_match_the_bytes_sent() -> None:
    spec = {"name": "x", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 8}}
    body, head = _binary_body({"inputs": [spec]}, [b"\0" * 4])
    with pytest.raises(RequestError, match="runs past the end"):
        parse_infer(body, head)
    body, head = _binary_body({"inputs": [spec]}, [b"\0" * 12])
    with pytest.raises(RequestError, match="4 bytes after the binary inputs"):
        parse_infer(body, head)
    spec["parameters"]["binary_data_size"] = 6
    body, head = _binary_body({"inputs": [spec]}, [b"\0" * 6])
    with pytest.raises(RequestError, match="6 bytes for shape"):
        parse_infer(body, head)


def test_outputs_go_back_as_json_or_bytes_as_asked() -> None:
    out = {"y": np.arange(6, dtype=np.float32).reshape(2, 3), "z": np.array([True, False])}
    body, head = encode_infer("m", InferRequest("7", {}), out)
    assert head is None
    doc = json.loads(body)
    assert doc["id"] == "7" and doc["model_name"] == "m"
    assert doc["outputs"][0] == {"name": "y", "datatype": "FP32", "shape": [2, 3], "data": [0, 1, 2, 3, 4, 5]}
    assert doc["outputs"][1]["data"] == [True, False]
    body, head = encode_infer("m", InferRequest(None, {}, {"y": True}), out)
    doc = json.loads(body[:head])
    assert [o["name"] for o in doc["outputs"]] == ["y"]
    assert doc["outputs"][0]["parameters"]["binary_data_size"] == 24
    np.testing.assert_array_equal(np.frombuffer(body[head:], np.float32).reshape(2, 3), out["y"])
    with pytest.raises(RequestError, match="no output 'w'"):
        encode_infer("m", InferRequest(None, {}, {"w": False}), out)
