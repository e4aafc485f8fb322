"""The Open Inference Protocol (KServe v2) on the wire: tensors in requests and responses, JSON and binary.

An infer request is JSON (``{"inputs": [{"name", "shape", "datatype", "data"}], "outputs": [...]}``), or,
with the binary tensor extension, that JSON followed by raw tensor bytes: the header
``Inference-Header-Content-Length`` says where the JSON ends, and each input sent as bytes carries
``parameters.binary_data_size``, its bytes following in the order of the inputs. Outputs are sent as bytes
where the request asks (``parameters.binary_data`` per output, or ``binary_data_output`` for all).

Pure functions over bytes and numpy arrays: no server library, so the protocol is tested on its own and
the HTTP layer only moves bytes. Every malformed request is a ``RequestError`` (an ``InputError``)
carrying the HTTP status to answer with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pathweave.errors import InputError

HEADER_LENGTH = "Inference-Header-Content-Length"

#: KServe v2 datatypes served (BYTES and BF16 have no numpy dtype that maps one to one; refused)
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
NAMES = {dt: name for name, dt in DATATYPES.items()}


class RequestError(InputError):
    """A request the server refuses; ``status`` is the HTTP status to answer with (4xx)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class TensorMeta:
    """A model input or output as the protocol describes it: ``-1`` marks a dimension that may vary."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass
class InferRequest:
    """A parsed infer request: the inputs by name, and which outputs go back, each as bytes or not."""

    id: str | None
    inputs: dict[str, np.ndarray]
    outputs: dict[str, bool] = field(default_factory=dict)  # name -> binary; empty means all
    binary_output: bool = False


def datatype_of(dtype: torch.dtype | np.dtype) -> str:
    """The protocol's name for a torch or numpy dtype (RequestError where it has none)."""
    if isinstance(dtype, torch.dtype):
        try:
            dtype = torch.empty(0, dtype=dtype).numpy().dtype
        except TypeError as exc:
            raise RequestError(f"dtype {dtype} has no KServe v2 datatype served here", 500) from exc
    name = NAMES.get(np.dtype(dtype))
    if name is None:
        raise RequestError(f"dtype {dtype} has no KServe v2 datatype served here", 500)
    return name


def _json(raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"the request is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise RequestError(f"the request is a JSON {type(doc).__name__}, expected an object")
    return doc


def _shape(spec: dict[str, Any], name: str) -> tuple[int, ...]:
    shape = spec.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise RequestError(f"input {name!r}: 'shape' must be a list of integers, got {shape!r}")
    if any(d < 0 for d in shape):
        raise RequestError(f"input {name!r}: negative size in shape {shape}")
    return tuple(shape)


def _dtype(spec: dict[str, Any], name: str) -> np.dtype:
    datatype = spec.get("datatype")
    if datatype not in DATATYPES:
        raise RequestError(
            f"input {name!r}: datatype {datatype!r} is not served; use one of {', '.join(DATATYPES)}"
        )
    return DATATYPES[datatype]


def _from_json_data(data: Any, dtype: np.dtype, shape: tuple[int, ...], name: str) -> np.ndarray:
    try:
        array = np.asarray(data, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise RequestError(f"input {name!r}: 'data' does not hold {NAMES[dtype]} values ({exc})") from exc
    if array.size != int(np.prod(shape)):
        raise RequestError(f"input {name!r}: {array.size} values in 'data' for shape {list(shape)}")
    return array.reshape(shape)


def _from_bytes(raw: bytes, dtype: np.dtype, shape: tuple[int, ...], name: str) -> np.ndarray:
    if len(raw) != int(np.prod(shape)) * dtype.itemsize:
        raise RequestError(f"input {name!r}: {len(raw)} bytes for shape {list(shape)} of {NAMES[dtype]}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()  # own the memory: the body is freed


def _binary_size(spec: dict[str, Any], name: str) -> int | None:
    params = spec.get("parameters") or {}
    if not isinstance(params, dict):
        raise RequestError(f"{name!r}: 'parameters' must be an object")
    size = params.get("binary_data_size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise RequestError(f"input {name!r}: binary_data_size must be a non-negative integer, got {size!r}")
    return size


def _inputs(doc: dict[str, Any], tail: bytes) -> dict[str, np.ndarray]:
    specs = doc.get("inputs")
    if not isinstance(specs, list) or not specs:
        raise RequestError("the request has no 'inputs' list")
    inputs, offset = {}, 0
    for spec in specs:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise RequestError(f"each input needs a 'name', got {spec!r:.200}")
        name = spec["name"]
        if name in inputs:
            raise RequestError(f"input {name!r} is given twice")
        shape, dtype, size = _shape(spec, name), _dtype(spec, name), _binary_size(spec, name)
        if size is None:
            if "data" not in spec:
                raise RequestError(f"input {name!r} has neither 'data' nor parameters.binary_data_size")
            inputs[name] = _from_json_data(spec["data"], dtype, shape, name)
            continue
        if offset + size > len(tail):
            raise RequestError(f"input {name!r}: binary_data_size {size} runs past the end of the body")
        inputs[name] = _from_bytes(tail[offset : offset + size], dtype, shape, name)
        offset += size
    if offset != len(tail):
        raise RequestError(f"{len(tail) - offset} bytes after the binary inputs belong to no input")
    return inputs


def _outputs(doc: dict[str, Any]) -> tuple[dict[str, bool], bool]:
    params = doc.get("parameters") or {}
    if not isinstance(params, dict):
        raise RequestError("'parameters' must be an object")
    binary_all = bool(params.get("binary_data_output", False))
    specs = doc.get("outputs") or []
    if not isinstance(specs, list):
        raise RequestError("'outputs' must be a list")
    wanted = {}
    for spec in specs:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise RequestError(f"each requested output needs a 'name', got {spec!r:.200}")
        out_params = spec.get("parameters") or {}
        if not isinstance(out_params, dict):
            raise RequestError(f"output {spec['name']!r}: 'parameters' must be an object")
        wanted[spec["name"]] = bool(out_params.get("binary_data", binary_all))
    return wanted, binary_all


def parse_infer(body: bytes, header_length: str | None) -> InferRequest:
    """The request in ``body``; ``header_length`` is the ``Inference-Header-Content-Length`` header."""
    if header_length is None:
        head, tail = body, b""
    else:
        try:
            n = int(header_length)
        except ValueError:
            raise RequestError(f"{HEADER_LENGTH} is not an integer: {header_length!r}") from None
        if not 0 <= n <= len(body):
            raise RequestError(f"{HEADER_LENGTH} {n} is outside the body's {len(body)} bytes")
        head, tail = body[:n], body[n:]
    doc = _json(head)
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise RequestError(f"'id' must be a string, got {request_id!r:.100}")
    outputs, binary_all = _outputs(doc)
    return InferRequest(request_id, _inputs(doc, tail), outputs, binary_all)


def encode_infer(
    model: str, request: InferRequest, outputs: dict[str, np.ndarray]
) -> tuple[bytes, int | None]:
    """The response body, and the JSON part's length where tensors follow as bytes (None for all-JSON)."""
    wanted = request.outputs or dict.fromkeys(outputs, request.binary_output)
    unknown = sorted(set(wanted) - set(outputs))
    if unknown:
        raise RequestError(
            f"model {model!r} has no output {', '.join(map(repr, unknown))}; it has {sorted(outputs)}"
        )
    docs, chunks = [], []
    for name, binary in wanted.items():
        array = np.ascontiguousarray(outputs[name])
        doc: dict[str, Any] = {"name": name, "datatype": datatype_of(array.dtype), "shape": list(array.shape)}
        if binary:
            raw = array.tobytes()
            doc["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            doc["data"] = array.reshape(-1).tolist()
        docs.append(doc)
    reply: dict[str, Any] = {"model_name": model, "outputs": docs}
    if request.id is not None:
        reply["id"] = request.id
    head = json.dumps(reply, allow_nan=True).encode()
    if not chunks:
        return head, None
    return head + b"".join(chunks), len(head)
