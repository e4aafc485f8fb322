"""The peers pathweave is measured against: PyTorch eager, torch.compile, ONNX Runtime, OpenVINO, CUDA.

Every builder has the signature ``build_X(model, inputs, threads, device) -> Candidate`` and raises
``Skip("reason")`` where its peer cannot run here (package missing, no CUDA, wrong device). Builders
never mutate the caller's model: anything that changes a module (``.to(device)``, inductor freezing)
works on a deep copy. Work that must not be timed (compiling, exporting, capturing) happens here, at
build time; ``Candidate.extra["build_s"]`` records how long it took.

Settings, each the peer's best documented one for batch-1 latency (see shared/BENCHMARKS.md):

- ``ort:seq``: ``ORT_SEQUENTIAL``, ``intra_op_num_threads=threads``.
- ``ort:par``: ``ORT_PARALLEL``, ``inter_op_num_threads=threads`` and ``intra_op_num_threads=1``, so
  that lanes x intra-op threads stays within the thread budget (the same rule pathweave obeys).
  Measured on googlenet, batch 1, 2 threads on 2 cores (medians of 40 interleaved rounds, a loaded
  machine): inter 2 x intra 1 33.9 ms, inter 2 x intra 2 (oversubscribed) 42.3 ms, inter 1 x intra 2
  31.4 ms (that one is ORT_SEQUENTIAL in all but name; ort:seq itself ran 16.7 ms).
- ``openvino``: ``PERFORMANCE_HINT=LATENCY``, ``INFERENCE_NUM_THREADS=threads`` and
  ``INFERENCE_PRECISION_HINT=f32``: on CPUs with bf16 support (AVX512-BF16, AMX) OpenVINO otherwise
  computes in bf16, which is neither the same dtype as the other candidates nor within tolerance.

Each CPU peer records the vector level it ran at (``Candidate.isa``, read back from its library): a
bench below the CPU's level (``bench.isa``) limits PyTorch and OpenVINO; ONNX Runtime cannot be limited
except through the patched copy of experiments/ort_mlas_avx2.py (``bench.isa.ort_isa`` reads it back).
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import tempfile
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch

from pathweave.bench.candidate import Candidate, Skip
from pathweave.bench.isa import openvino_isa, ort_isa, torch_isa
from pathweave.errors import InputError, MissingDependencyError, require
from pathweave.sequential import intra_op_threads

Builder = Callable[[torch.nn.Module, tuple[torch.Tensor, ...], int, str], Candidate]


# ---------------------------------------------------------------------------------------------- helpers


def _is_cuda(device: str) -> bool:
    return str(device).startswith("cuda")


def _need_cpu(name: str, device: str) -> None:
    if _is_cuda(device):
        raise Skip(f"{name} is a CPU peer; on cuda use the cuda:* peers")


def _need_cuda(device: str) -> None:
    if not _is_cuda(device):
        raise Skip("CUDA peer; the device is cpu")
    if not torch.cuda.is_available():
        raise Skip("CUDA is not available here")


def _optional(module: str, extra: str) -> Any:
    """Import an optional peer package, turning a missing one into ``Skip``."""
    try:
        return require(module, extra)
    except MissingDependencyError as exc:
        raise Skip(f"{module} is not installed (pip install 'pathweave[{extra}]')") from exc


def _one_line(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _on_device(model: torch.nn.Module, device: str) -> torch.nn.Module:
    """``model`` itself if all its tensors are already on ``device``, else a moved deep copy."""
    want = torch.device(device)
    tensors = list(model.parameters()) + list(model.buffers())
    if all(_same_device(t.device, want) for t in tensors):
        return model
    return copy.deepcopy(model).to(want)


def _same_device(have: torch.device, want: torch.device) -> bool:
    return have.type == want.type and (want.index is None or have.index == want.index)


def _inputs_on(inputs: tuple[torch.Tensor, ...], device: str) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(device) for t in inputs)


# ------------------------------------------------------------------------------------------ eager (CPU)


def _eager(
    name: str,
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    threads: int,
    channels_last: bool = False,
) -> Candidate:
    """Eager PyTorch; with ``channels_last``, on a channels_last copy of the model, with 4-d inputs
    converted inside the timed call (as pathweave's stacks convert theirs: callers hand over NCHW)."""
    model = _on_device(model, "cpu")
    if channels_last:
        model = copy.deepcopy(model).to(memory_format=torch.channels_last)
    inputs = _inputs_on(inputs, "cpu")

    def layout(x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if channels_last and x.dim() == 4 else x

    def run() -> Any:
        with torch.inference_mode():
            return model(*(layout(x) for x in inputs))

    note = "inference_mode, channels_last" if channels_last else "inference_mode"
    return Candidate(name, "peer", run, threads, note=f"{note}, {threads} thread(s)", isa=torch_isa())


def build_eager_1t(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str
) -> Candidate:
    """PyTorch eager on one thread: the sequential baseline."""
    _need_cpu("eager:1t", device)
    return _eager("eager:1t", model, inputs, 1)


def build_eager(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str
) -> Candidate:
    """PyTorch eager with the whole thread budget as intra-op threads."""
    _need_cpu("eager", device)
    return _eager("eager", model, inputs, threads)


def build_eager_channels_last(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str
) -> Candidate:
    """PyTorch eager on channels_last weights and inputs, the inputs converted inside the timed call."""
    _need_cpu("eager:cl", device)
    return _eager("eager:cl", model, inputs, threads, channels_last=True)


# ------------------------------------------------------------------------------------ torch.compile (CPU)


@contextlib.contextmanager
def _count_freezes() -> Iterator[list[int]]:
    """Counts calls of inductor's ``freeze`` pass, the proof that freezing took effect at compile time."""
    calls: list[int] = []
    try:
        import torch._inductor.freezing as freezing
    except ImportError:
        yield calls
        return
    original = freezing.freeze

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    with mock.patch.object(freezing, "freeze", counted):
        yield calls


def _compiled(
    name: str, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, freezing: bool
) -> Candidate:
    import torch._inductor.config as inductor_config

    # A private copy: freezing folds weights into constants, and dynamo guards stay per candidate.
    model = copy.deepcopy(_on_device(model, "cpu"))
    inputs = _inputs_on(inputs, "cpu")
    # options= (not only the config patch below) makes the backend differ from a plain compile's, so
    # dynamo cannot reuse a graph compiled without freezing for a copy of the same model class.
    compiled = torch.compile(model, options={"freezing": True} if freezing else None)

    def run() -> Any:
        with torch.no_grad():  # inductor freezes only with grad off
            return compiled(*inputs)

    patch = inductor_config.patch(freezing=True) if freezing else contextlib.nullcontext()
    start = time.perf_counter()
    try:
        # inductor reads config.freezing when it compiles, i.e. during the first call
        with intra_op_threads(threads), patch, _count_freezes() as freezes:
            run()
    except Exception as exc:
        raise Skip(f"torch.compile failed: {_one_line(exc)}") from exc
    build_s = time.perf_counter() - start
    if freezing and not freezes:
        raise Skip("inductor freezing did not take effect (graph reused or compiled with grad on)")
    with intra_op_threads(threads):
        run()  # a guard failure would recompile here, still outside the timed region
    note = "inductor, freezing" if freezing else "inductor, default mode"
    extra: dict[str, Any] = {"build_s": build_s}
    if freezing:
        extra["frozen_graphs"] = len(freezes)
    return Candidate(name, "peer", run, threads, note=note, extra=extra, isa=torch_isa())


def build_compile(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str
) -> Candidate:
    """``torch.compile(model)``, default mode; compiled here so compile time is not timed."""
    _need_cpu("compile", device)
    return _compiled("compile", model, inputs, threads, freezing=False)


def build_compile_freezing(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str
) -> Candidate:
    """``torch.compile`` with ``torch._inductor.config.freezing`` on while it compiles."""
    _need_cpu("compile:freezing", device)
    return _compiled("compile:freezing", model, inputs, threads, freezing=True)


# ------------------------------------------------------------------------------------------ ONNX export


@dataclass
class _Export:
    model: weakref.ReferenceType[torch.nn.Module]
    data: bytes
    exporter: str
    opset: int
    seconds: float


# id(model), input shapes and dtypes -> the export; the weak reference rules out a recycled id.
_ONNX_CACHE: dict[tuple[Any, ...], _Export] = {}


def _export_key(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
    return (id(model), tuple((tuple(t.shape), str(t.dtype)) for t in inputs))


def _export_to(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], path: str, dynamo: bool) -> None:
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(model, inputs, path, dynamo=True, verbose=False)
        else:
            torch.onnx.export(model, inputs, path, dynamo=False)


def onnx_export(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> _Export:
    """The model as ONNX bytes, exported once per model object and input signature (cached).

    Tries the dynamo exporter first and falls back to the legacy TorchScript one. The file is
    written to a temporary directory that is removed afterwards.
    """
    onnx = _optional("onnx", "onnx")
    key = _export_key(model, inputs)
    hit = _ONNX_CACHE.get(key)
    if hit is not None and hit.model() is model:
        return hit
    errors: list[str] = []
    for exporter, dynamo in (("dynamo", True), ("legacy", False)):
        with tempfile.TemporaryDirectory(prefix="pathweave-onnx-") as tmp:
            path = os.path.join(tmp, "model.onnx")
            start = time.perf_counter()
            try:
                _export_to(model, inputs, path, dynamo)
                proto = onnx.load(path)  # pulls in external data, if the exporter wrote any
                data = proto.SerializeToString()
            except Exception as exc:
                errors.append(f"{exporter}: {_one_line(exc, 100)}")
                continue
            seconds = time.perf_counter() - start
        opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
        _ONNX_CACHE[key] = _Export(weakref.ref(model), data, exporter, opset, seconds)
        return _ONNX_CACHE[key]
    raise Skip("ONNX export failed (" + "; ".join(errors) + ")")


def use_onnx_file(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], data: bytes) -> None:
    """Make the ONNX peers run ``data`` (the user's own .onnx file) for ``model`` instead of an export."""
    onnx = _optional("onnx", "onnx")
    proto = onnx.load_from_string(data)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    _ONNX_CACHE[_export_key(model, inputs)] = _Export(weakref.ref(model), data, "original file", opset, 0.0)


def _numpy_inputs(inputs: tuple[torch.Tensor, ...]) -> list[Any]:
    return [t.detach().to("cpu").contiguous().numpy() for t in inputs]


def _export_note(exp: _Export) -> str:
    return f"{exp.exporter} exporter, opset {exp.opset}"


# ---------------------------------------------------------------------------------------- ONNX Runtime


def ort_options(ort: Any, threads: int, parallel: bool) -> Any:
    """The ``SessionOptions`` of ``ort:seq`` (``parallel=False``) or ``ort:par``; public so that a profile
    of ONNX Runtime (experiments/layer_class_profile.py) runs the peer's own settings."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if parallel:
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        options.inter_op_num_threads = threads
        options.intra_op_num_threads = 1
    else:
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return options


def _ort_session(ort: Any, data: bytes, threads: int, parallel: bool, providers: list[str]) -> Any:
    return ort.InferenceSession(data, ort_options(ort, threads, parallel), providers=providers)


def _ort(
    name: str,
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    threads: int,
    device: str,
    parallel: bool,
) -> Candidate:
    ort = _optional("onnxruntime", "onnx")
    providers = ["CPUExecutionProvider"]
    if _is_cuda(device):
        if parallel:
            raise Skip("ORT_PARALLEL does not support the CUDA execution provider")
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise Skip("onnxruntime here has no CUDAExecutionProvider (needs onnxruntime-gpu)")
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    exp = onnx_export(model, inputs)
    start = time.perf_counter()
    try:
        session = _ort_session(ort, exp.data, threads, parallel, providers)
    except Exception as exc:
        raise Skip(f"onnxruntime cannot load the export: {_one_line(exc)}") from exc
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(inputs):
        raise Skip(f"the ONNX graph takes {len(names)} inputs, the model {len(inputs)}")
    feed = dict(zip(names, _numpy_inputs(inputs), strict=True))

    def run() -> list[Any]:
        return session.run(None, feed)

    threads_note = f"inter {threads} x intra 1" if parallel else f"intra {threads}"
    extra = {"export_s": exp.seconds, "build_s": time.perf_counter() - start, "providers": providers}
    note = f"{_export_note(exp)}, {threads_note}"
    # MLAS picks its kernels from CPUID: no variable or option lowers them (but see ort_isa)
    isa, patched = ort_isa() if not _is_cuda(device) else (None, False)
    if patched:
        note += ", MLAS AVX-512 branch skipped (experiments/ort_mlas_avx2.py)"
    return Candidate(name, "peer", run, threads, note=note, extra=extra, isa=isa, can_limit=patched)


def build_ort_seq(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str
) -> Candidate:
    """ONNX Runtime, all graph optimizations, sequential execution mode."""
    return _ort("ort:seq", model, inputs, threads, device, parallel=False)


def build_ort_par(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str
) -> Candidate:
    """ONNX Runtime, all graph optimizations, parallel execution mode (its inter-operator parallelism)."""
    return _ort("ort:par", model, inputs, threads, device, parallel=True)


# -------------------------------------------------------------------------------------------- OpenVINO


def openvino_model(
    ov: Any, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]
) -> tuple[Any, str, float]:
    """The OpenVINO model read from the shared ONNX export, or converted from torch if that fails; with
    how it was made and the seconds that took."""
    try:
        exp = onnx_export(model, inputs)
        return ov.Core().read_model(io.BytesIO(exp.data)), f"from ONNX, {_export_note(exp)}", exp.seconds
    except Exception as onnx_exc:  # Skip included: ov.convert_model may still manage
        start = time.perf_counter()
        try:
            with torch.no_grad():
                converted = ov.convert_model(model, example_input=inputs)
        except Exception as exc:
            raise Skip(
                f"OpenVINO cannot read the model: {_one_line(onnx_exc, 80)}; {_one_line(exc, 80)}"
            ) from exc
        return converted, "ov.convert_model from torch", time.perf_counter() - start


def openvino_config(threads: int) -> dict[str, Any]:
    """The ``compile_model`` settings of the ``openvino`` peer (see the module docstring)."""
    return {
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": "f32",
    }


def build_openvino(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str
) -> Candidate:
    """OpenVINO on CPU, LATENCY hint, ``threads`` inference threads, f32; one InferRequest reused."""
    _need_cpu("openvino", device)
    ov = _optional("openvino", "openvino")
    ov_model, note, export_s = openvino_model(ov, model, inputs)
    config = openvino_config(threads)
    start = time.perf_counter()
    try:
        compiled = ov.Core().compile_model(ov_model, "CPU", config)
        request = compiled.create_infer_request()
    except Exception as exc:
        raise Skip(f"OpenVINO cannot compile the model: {_one_line(exc)}") from exc
    arrays = _numpy_inputs(inputs)
    if len(request.model_inputs) != len(arrays):
        raise Skip(f"the OpenVINO model takes {len(request.model_inputs)} inputs, the model {len(arrays)}")
    for index, array in enumerate(arrays):
        request.set_input_tensor(index, ov.Tensor(array))

    def run() -> list[Any]:
        return list(request.infer().to_tuple())

    extra = {"export_s": export_s, "build_s": time.perf_counter() - start}
    isa, wider = openvino_isa(compiled)
    note = f"{note}, LATENCY, f32" + (f"; {wider}" if wider else "")
    return Candidate("openvino", "peer", run, threads, note=note, extra=extra, isa=isa)


# ------------------------------------------------------------------------------------------------ CUDA


def _cuda_copy(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]
) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return copy.deepcopy(model).to("cuda"), tuple(t.to("cuda").clone() for t in inputs)


def build_cuda_eager(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str
) -> Candidate:
    """PyTorch eager on the GPU."""
    _need_cuda(device)
    model = _on_device(model, "cuda")
    inputs = _inputs_on(inputs, "cuda")

    def run() -> Any:
        with torch.inference_mode():
            return model(*inputs)

    return Candidate("cuda:eager", "peer", run, threads, sync=torch.cuda.synchronize, note="inference_mode",
                     cuda_events=True)  # fmt: skip


def build_cuda_graph(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str
) -> Candidate:
    """The whole forward captured into one ``torch.cuda.CUDAGraph``; ``run()`` replays it."""
    _need_cuda(device)
    model, static = _cuda_copy(model, inputs)
    start = time.perf_counter()
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm-up: cuDNN/cuBLAS autotuning and allocations happen off-graph
                model(*static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                outputs = model(*static)
        except Exception as exc:
            raise Skip(f"CUDA graph capture failed: {_one_line(exc)}") from exc
    torch.cuda.synchronize()

    def run() -> Any:
        graph.replay()
        return outputs  # static outputs: overwritten by the next replay

    extra = {"build_s": time.perf_counter() - start}
    return Candidate(
        "cuda:graph",
        "peer",
        run,
        threads,
        sync=torch.cuda.synchronize,
        note="static inputs",
        extra=extra,
        cuda_events=True,
    )


def build_cuda_compile_ro(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str
) -> Candidate:
    """``torch.compile(mode="reduce-overhead")``: inductor kernels replayed through CUDA graphs."""
    return _cuda_compile(model, inputs, threads, device, "reduce-overhead", "cuda:compile-ro")


def build_cuda_compile_max(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str
) -> Candidate:
    """``torch.compile(mode="max-autotune")``: autotuned inductor kernels, also through CUDA graphs."""
    return _cuda_compile(model, inputs, threads, device, "max-autotune", "cuda:compile-max")


def _cuda_compile(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], threads: int, device: str, mode: str, name: str
) -> Candidate:
    _need_cuda(device)
    model, static = _cuda_copy(model, inputs)
    compiled = torch.compile(model, mode=mode)

    def run() -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            return compiled(*static)

    start = time.perf_counter()
    try:
        for _ in range(3):  # compile, then cudagraph-trees warm-up and recording
            run()
        torch.cuda.synchronize()
    except Exception as exc:
        raise Skip(f"torch.compile({mode}) failed: {_one_line(exc)}") from exc
    extra = {"build_s": time.perf_counter() - start}
    return Candidate(name, "peer", run, threads, sync=torch.cuda.synchronize, note=mode, extra=extra,
                     cuda_events=True)  # fmt: skip


# -------------------------------------------------------------------------------------------- registry

PEERS: dict[str, Builder] = {
    "eager:1t": build_eager_1t,
    "eager": build_eager,
    "eager:cl": build_eager_channels_last,
    "compile": build_compile,
    "compile:freezing": build_compile_freezing,
    "ort:seq": build_ort_seq,
    "ort:par": build_ort_par,
    "openvino": build_openvino,
    "cuda:eager": build_cuda_eager,
    "cuda:graph": build_cuda_graph,
    "cuda:compile-ro": build_cuda_compile_ro,
    "cuda:compile-max": build_cuda_compile_max,
}

_CPU_PEERS = {
    "eager:1t",
    "eager",
    "eager:cl",
    "compile",
    "compile:freezing",
    "ort:seq",
    "ort:par",
    "openvino",
}
#: ORT_PARALLEL is CPU-only
_CUDA_PEERS = {"ort:seq", "cuda:eager", "cuda:graph", "cuda:compile-ro", "cuda:compile-max"}


def peer_names(device: str) -> list[str]:
    """The peers that make sense on ``device`` ("cpu" or "cuda"), in ``PEERS`` order."""
    if _is_cuda(device):
        return [name for name in PEERS if name in _CUDA_PEERS]
    if str(device) == "cpu":
        return [name for name in PEERS if name in _CPU_PEERS]
    raise InputError(f"unknown device {device!r}; use 'cpu' or 'cuda'")
