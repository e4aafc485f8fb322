"""Python side of the native tile runtime (``native/tile_runtime.c``): load it, hand it a tile graph.

The graph is CSR arrays of int32 (parents and children of every tile), an op code per tile and a depth
column per tile (0..63, deeper tiles run first). The arrays are kept alive here for as long as the
runtime lives, because the C side reads them in place. ``run()`` goes through ctypes, which releases
the GIL for the whole inference.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from pathweave.errors import ClosedError, ExecutionError, InputError, MissingDependencyError, UnsupportedError
from pathweave.machine import ISA_LEVELS, cpu_isa
from pathweave.tiles import abi
from pathweave.tiles.abi import MAX_COLUMNS
from pathweave.tiles.graph import TileGraph

_LIB: ctypes.CDLL | None = None
_I32P = np.ctypeslib.ndpointer(np.int32, flags="C_CONTIGUOUS")
_F32P = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")


def _library() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        here = Path(__file__).parent / "native"
        found = [here / f"_tile_runtime{s}" for s in importlib.machinery.EXTENSION_SUFFIXES]
        path = next((p for p in found if p.exists()), None)
        if path is None:
            raise MissingDependencyError(
                f"the native tile runtime is not built (no _tile_runtime*.so in {here}); reinstall pathweave "
                "with a C compiler present: pip install -e ."
            )
        lib = ctypes.CDLL(str(path))
        lib.pw_create.restype = ctypes.c_void_p
        lib.pw_create.argtypes = [ctypes.c_int32, _I32P, _I32P, _I32P, _I32P, _I32P, _I32P, ctypes.c_int]
        lib.pw_run.argtypes = [ctypes.c_void_p]
        lib.pw_set_graph.argtypes = [ctypes.c_void_p, ctypes.c_int32, *[_I32P] * 6]
        lib.pw_set_workers.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.pw_workers.argtypes = [ctypes.c_void_p]
        lib.pw_steals.restype = ctypes.c_long
        lib.pw_steals.argtypes = [ctypes.c_void_p]
        lib.pw_ran_on.restype = ctypes.POINTER(ctypes.c_int32)
        lib.pw_ran_on.argtypes = [ctypes.c_void_p]
        lib.pw_set_test_data.argtypes = [ctypes.c_void_p, _F32P, _F32P, _I32P]
        lib.pw_destroy.argtypes = [ctypes.c_void_p]
        lib.pw_set_trace.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.pw_set_linger.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        lib.pw_linger.restype = ctypes.c_int64
        lib.pw_linger.argtypes = [ctypes.c_void_p]
        lib.pw_park.argtypes = [ctypes.c_void_p]
        lib.pw_set_homes.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        i64p = np.ctypeslib.ndpointer(np.int64, flags="C_CONTIGUOUS")
        lib.pw_set_program.argtypes = [ctypes.c_void_p, i64p, _I32P, _I32P, _I32P, ctypes.c_int64,
                                       ctypes.c_void_p]  # fmt: skip
        _force_isa(lib, os.environ.get(ISA_ENV, "").strip())
        ctypes.c_int.in_dll(lib, "pw_gelu_eager").value = eager_gelu_edges()
        _LIB = lib
    return _LIB


def eager_gelu_edges() -> int:
    """How eager GELU (erf form) rounds at the edges in this process, as ``pw_gelu_eager``'s bits
    (tile_kernels.h): 1 if +inf gives NaN (ATen's AVX-512 vector erf; AVX2 and scalar give +inf), 2 if
    x / 2 (1 + erf) is finite up to FLT_MAX (AVX2; AVX-512 forms x (1 + erf) first, +inf above FLT_MAX / 2).
    The tile kernels follow eager's answers."""
    import torch

    y = torch.nn.functional.gelu(torch.tensor([float("inf"), 3.0e38] * 32))
    return abi.GELU_POSINF_NAN * bool(y[0].isnan()) | abi.GELU_HALVE_FIRST * bool(y[1].isfinite())


#: forces the native kernels' instruction set for the whole process (measuring AVX2 on an AVX-512 CPU,
#: testing the generic code): avx512, avx2 or generic; unset: the widest the CPU runs
ISA_ENV = "PATHWEAVE_ISA"


def _force_isa(lib: ctypes.CDLL, isa: str) -> None:
    if not isa:
        return
    if isa not in GEMM_ISAS:
        raise InputError(
            f"{ISA_ENV}={isa!r} is not an instruction set level; use one of {', '.join(GEMM_ISAS)}"
        )
    if lib.pw_gemm_force(isa.encode()):  # the caller's setting: an error, not a reason to fall back to ATen
        raise InputError(
            f"{ISA_ENV}={isa}: this CPU cannot run the {isa} kernels (it runs {cpu_isa()}); unset it or "
            f"use one of {', '.join(runnable_gemm_isas())}"
        )


_SGEMM: int | None = None
_CORE: str = ""
#: forces OpenBLAS's kernel family for the tile kernels (e.g. SkylakeX, Haswell); unset: the family of the
#: level the tile kernels run (``BLAS_CORES``) where it is below the CPU's, else OpenBLAS reads the CPU
CORETYPE_ENV = "PATHWEAVE_OPENBLAS_CORETYPE"
#: OpenBLAS's kernel family for a level forced below the CPU's: Haswell is its AVX2 + FMA family, Nehalem
#: its newest without AVX (the scipy-openblas32 wheel maps Prescott and Core2 to the SSE1 Katmai)
BLAS_CORES = {"avx2": "Haswell", "generic": "Nehalem"}


def sgemm_address() -> int:
    """``cblas_sgemm`` of OpenBLAS (the scipy-openblas32 wheel), loaded once and set to one thread: the
    runtime's workers are the parallelism, each calls it on its own tiles.

    OpenBLAS picks its kernels for the CPU when it is loaded, unless ``OPENBLAS_CORETYPE`` names a
    family. Machines that set that variable globally (ours sets ``Haswell``, AVX2) would halve the
    products on an AVX-512 CPU, while ONNX Runtime and oneDNN use AVX-512 there. So the variable is
    hidden while this copy loads; ``PATHWEAVE_OPENBLAS_CORETYPE`` forces a family instead, and a level
    forced below the CPU's (``PATHWEAVE_ISA``, ``use_gemm_isa`` before the first product) picks that
    level's family (``BLAS_CORES``): OpenBLAS chooses once, when it loads."""
    global _SGEMM, _CORE
    if _SGEMM is None:
        saved = os.environ.pop("OPENBLAS_CORETYPE", None)
        level = gemm_isa()
        core = os.environ.get(CORETYPE_ENV) or (BLAS_CORES.get(level, "") if level != cpu_isa() else "")
        if core:
            os.environ["OPENBLAS_CORETYPE"] = core
        try:  # importing the wheel already loads the library
            import scipy_openblas32

            path = next(Path(scipy_openblas32.get_lib_dir()).glob("libscipy_openblas*.so*"))
            lib = ctypes.CDLL(str(path))
        except ImportError as exc:
            raise MissingDependencyError(
                "the tile kernels multiply matrices with OpenBLAS: pip install scipy-openblas32"
            ) from exc
        finally:
            os.environ.pop("OPENBLAS_CORETYPE", None)
            if saved is not None:
                os.environ["OPENBLAS_CORETYPE"] = saved
        lib.scipy_openblas_set_num_threads(1)
        lib.scipy_openblas_get_corename.restype = ctypes.c_char_p
        _CORE = (lib.scipy_openblas_get_corename() or b"").decode()
        _SGEMM = int(ctypes.cast(lib.scipy_cblas_sgemm, ctypes.c_void_p).value or 0)
        _KEEP.append(lib)
    return _SGEMM


def blas_core() -> str:
    """The kernel family OpenBLAS chose for the tile kernels (loads it if needed), e.g. "SkylakeX"."""
    sgemm_address()
    return _CORE


_KEEP: list[ctypes.CDLL] = []


def csr(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) as int32 from one list of neighbours per tile."""
    ptr = np.zeros(len(lists) + 1, dtype=np.int32)
    ptr[1:] = np.cumsum([len(x) for x in lists])
    idx = np.fromiter((i for x in lists for i in x), dtype=np.int32, count=int(ptr[-1]))
    return ptr, idx


def depth_columns(parents: list[list[int]]) -> np.ndarray:
    """Depth of every tile (tiles in topological order), scaled onto the runtime's 64 columns."""
    depth = np.zeros(len(parents), dtype=np.int64)
    for t, ps in enumerate(parents):
        if ps:
            depth[t] = 1 + max(depth[p] for p in ps)
    return scale_columns(depth)


def scale_columns(depth: np.ndarray) -> np.ndarray:
    """Depths (roots 0) onto the runtime's columns 0..63, in proportion to the deepest."""
    top = int(depth.max(initial=0)) + 1
    return (depth * MAX_COLUMNS // top).astype(np.int32)


def _checked(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """A graph's CSR arrays, op codes and columns as contiguous int32, its tiles checked to come in
    topological order."""
    p_ptr, p_idx = arrays[0], arrays[1]
    child = np.repeat(np.arange(len(p_ptr) - 1, dtype=np.int64), np.diff(p_ptr))
    if len(p_idx) and (p_idx >= child).any():
        raise ExecutionError("tiles must come in topological order (every parent before its child)")
    return tuple(np.ascontiguousarray(a, dtype=np.int32) for a in arrays)


class TileRuntime:
    """One tile graph on ``workers`` scheduling engines (the caller's thread is engine 0).

    ``parents`` lists each tile's parents (tiles in topological order); ``from_graph`` takes a
    ``graph.TileGraph`` and its CSR arrays as they are."""

    def __init__(self, parents: list[list[int]], ops: np.ndarray, workers: int = 1) -> None:
        children: list[list[int]] = [[] for _ in range(len(parents))]
        for t, ps in enumerate(parents):
            for p in ps:
                children[p].append(t)
        self._start(*csr(parents), *csr(children), ops, depth_columns(parents), workers)

    @classmethod
    def from_graph(cls, graph: TileGraph, ops: np.ndarray, workers: int = 1) -> TileRuntime:
        rt = cls.__new__(cls)
        p_ptr, p_idx = graph.parents_indptr, graph.parents_indices
        rt._start(p_ptr, p_idx, graph.children_indptr, graph.children_indices, ops,
                  scale_columns(graph.tile_depths() - 1), workers)  # fmt: skip
        return rt

    def _start(
        self,
        p_ptr: np.ndarray,
        p_idx: np.ndarray,
        c_ptr: np.ndarray,
        c_idx: np.ndarray,
        ops: np.ndarray,
        cols: np.ndarray,
        workers: int,
    ) -> None:
        self._lib = _library()
        self._graph = _checked(p_ptr, p_idx, c_ptr, c_idx, ops, cols)
        self._rt = self._lib.pw_create(self.n, *self._graph, workers)
        if not self._rt:
            raise ExecutionError("the native tile runtime could not allocate its state")
        self._test: tuple[np.ndarray, ...] = ()

    @property
    def handle(self) -> int:
        """The native runtime, or ``ClosedError`` once ``close()`` has freed it (a NULL handle would
        crash the process in C)."""
        if not self._rt:
            raise ClosedError("the tile runtime is closed; build the strategy again to run it")
        return self._rt

    @property
    def n(self) -> int:
        """Tiles in the current graph."""
        return len(self._graph[0]) - 1

    @property
    def ops(self) -> np.ndarray:
        """The current graph's op code per tile."""
        return self._graph[4]

    def set_graph(
        self,
        p_ptr: np.ndarray,
        p_idx: np.ndarray,
        c_ptr: np.ndarray,
        c_idx: np.ndarray,
        ops: np.ndarray,
        cols: np.ndarray,
    ) -> None:
        """Another tile graph (CSR arrays, op codes, depth columns) for the next inferences, on the same
        engines; call it between inferences from the thread that calls ``run``. A program set before
        must be set again for the new graph's tiles (``set_program``)."""
        graph = _checked(p_ptr, p_idx, c_ptr, c_idx, ops, cols)
        if self._lib.pw_set_graph(self.handle, len(graph[0]) - 1, *graph):
            raise ExecutionError(f"the native tile runtime could not grow to {len(graph[0]) - 1} tiles")
        self._graph = graph  # the old arrays are released only once the C side no longer reads them
        self._homes = None  # the C side dropped them with the old graph

    #: each tile's home worker (``set_homes``), None: every ready tile stays with whoever made it ready
    _homes: np.ndarray | None = None

    def set_homes(self, homes: np.ndarray | None, steal: bool = True) -> None:
        """Placement for the next inferences (Ramiel's lanes on the native engines): a tile that becomes
        ready goes to its home worker's row (``homes[t] % workers``; -1: to the worker that made it ready),
        roots start there. ``steal=False`` keeps every worker to its own row (static lanes); ``True`` lets
        idle workers steal as without homes (lanes as a preference). None: no placement."""
        if homes is None:
            self._lib.pw_set_homes(self.handle, None, 0)
            self._homes = None
            return
        homes = np.ascontiguousarray(homes, np.int32)
        if homes.shape != (self.n,) or (homes < -1).any():
            raise InputError(f"homes must be {self.n} worker numbers >= -1, got shape {homes.shape}")
        self._lib.pw_set_homes(self.handle, homes.ctypes.data, 0 if steal else 1)
        self._homes = homes  # kept alive while the C side reads it

    @property
    def workers(self) -> int:
        return int(self._lib.pw_workers(self.handle))

    @property
    def linger_ms(self) -> float:
        """How long idle workers spin for the next inference before they park (default 200 ms, as Intel
        OpenMP's KMP_BLOCKTIME): a thread parked for tens of ms woke too late on our VMs to take part in
        the next run. Spinning takes a core from other work; 0 parks at once."""
        return self._lib.pw_linger(self.handle) / 1e6

    def park(self) -> None:
        """Workers spinning for the next inference park now; the next ``run`` wakes them (a benchmark
        calls it before other runtimes are timed, so that our spinning does not slow them)."""
        self._lib.pw_park(self.handle)

    @linger_ms.setter
    def linger_ms(self, ms: float) -> None:
        if not ms >= 0:
            raise InputError(f"linger_ms must be a number >= 0, not {ms!r}")
        self._lib.pw_set_linger(self.handle, int(ms * 1e6))

    def set_workers(self, n: int) -> None:
        """Add or remove engines between inferences."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InputError(f"workers must be an int >= 1, not {n!r}")
        if self._lib.pw_set_workers(self.handle, n) or self.workers != n:
            raise ExecutionError(f"could not start {n} workers ({self.workers} running)")

    def set_test_data(self, out: np.ndarray, bias: np.ndarray, spin: np.ndarray) -> None:
        """Buffers of the checking kernel (op OP_TEST); kept alive here."""
        self._test = (out, np.ascontiguousarray(bias, np.float32), np.ascontiguousarray(spin, np.int32))
        self._lib.pw_set_test_data(self.handle, *self._test)

    def set_program(
        self, layers: np.ndarray, tile_layer: np.ndarray, lo: np.ndarray, hi: np.ndarray, scratch_floats: int
    ) -> None:
        """Layer kernels for op OP_LAYER (``tiles.program``): a row per layer, each tile's layer and
        box (int32 [tiles, 4]), the scratch floats a worker needs. The arrays are kept alive here."""
        self._program = (np.ascontiguousarray(layers, np.int64), np.ascontiguousarray(tile_layer, np.int32),
                         np.ascontiguousarray(lo, np.int32), np.ascontiguousarray(hi, np.int32))  # fmt: skip
        self._lib.pw_set_program(self.handle, *self._program, int(scratch_floats), sgemm_address())

    #: the tile whose kernel failed in the last inference (None when it succeeded)
    failed_tile: int | None = None

    def run(self) -> None:
        """One inference; it returns once every tile has run, without waiting for workers that lost their
        core to leave the engine (they leave, or take part in the next run; ``native/tile_runtime.c``)."""
        err = self._lib.pw_run(self.handle)
        self.failed_tile = err - 1 if err else None
        if err:
            raise ExecutionError(f"tile {err - 1} (op {self.ops[err - 1]}) failed in the native runtime")

    def ran_on(self) -> np.ndarray:
        """The worker that ran each tile in the last inference."""
        return np.ctypeslib.as_array(self._lib.pw_ran_on(self.handle), shape=(self.n,)).copy()

    @contextmanager
    def tracing(self) -> Iterator[np.ndarray]:
        """Inferences run inside record each tile's kernel start and end (int64 [tiles, 2], monotonic ns;
        the last inference's values stay). Not across ``set_graph``: that stops the recording. Not
        nested: leaving the inner context stops the recording."""
        times = np.zeros((self.n, 2), dtype=np.int64)
        self._lib.pw_set_trace(self.handle, times.ctypes.data)
        try:
            yield times
        finally:
            if self._rt:
                self._lib.pw_set_trace(self._rt, None)

    @property
    def steals(self) -> int:
        return int(self._lib.pw_steals(self.handle))

    def close(self) -> None:
        if getattr(self, "_rt", None):
            self._lib.pw_destroy(self._rt)
            self._rt = None

    def __del__(self) -> None:
        self.close()


GEMM_ISAS = ISA_LEVELS


def gemm_isa() -> str:
    """The instruction set of the convolution micro-kernels on this CPU (``native/tile_gemm.c``)."""
    lib = _library()
    lib.pw_gemm_isa.restype = ctypes.c_char_p
    return (lib.pw_gemm_isa() or b"").decode()


#: the copy of the hot loops (im2col, Winograd's transforms, pools, element-wise, rows of the transformer
#: kernels: ``PW_HOT_FN`` in ``native/tile_kernels.h``) that runs for each value of ``pw_hot_level``
HOT_COPIES = ("x86-64", "x86-64-v3", "x86-64-v4")


def hot_copy() -> str:
    """The copy of the hot loops that runs now: it follows ``gemm_isa()`` (``PATHWEAVE_ISA``,
    ``use_gemm_isa``), as the matrix kernels do, down to what the CPU runs."""
    return HOT_COPIES[_library().pw_hot_level()]


def runnable_gemm_isas() -> tuple[str, ...]:
    """The levels of ``GEMM_ISAS`` this CPU runs, widest first: its own (``machine.cpu_isa``, the level the
    kernels pick unforced) and every one below it, so that tests can run each kernel family under each."""
    return GEMM_ISAS[GEMM_ISAS.index(cpu_isa()) :]


def use_gemm_isa(isa: str) -> None:
    """Run the convolution micro-kernels of ``isa`` from now on, in every runtime of this process (tests
    of the paths the CPU would not pick)."""
    if isa not in GEMM_ISAS:
        raise InputError(f"unknown micro-kernel set {isa!r}; known: {', '.join(GEMM_ISAS)}")
    if _library().pw_gemm_force(isa.encode()):
        raise UnsupportedError(f"this CPU cannot run the {isa} micro-kernels")


def winograd_scratch(channels_in: int, rows: int, channels_out: int, width: int) -> int:
    """Scratch floats a Winograd convolution tile needs (``native/tile_winograd.c``): ``channels_in``
    input channels, tiles of at most ``rows`` output rows and ``channels_out`` output channels, maps
    ``width`` outputs wide."""
    fn = _library().pw_winograd_scratch
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int64] * 4
    return int(fn(channels_in, rows, channels_out, width))


def blocked_floats(k: int, positions: int) -> int:
    """Floats of a 1x1 tile's channel-blocked copy of an NCHW input (``native/tile_gemm_b.c``): ``k``
    channels by ``positions`` positions, rounded up to the kernel's blocks of 8 and 4."""
    fn = _library().pw_blocked_scratch
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int64] * 2
    return int(fn(k, positions))


def dwpw_scratch(row: np.ndarray, depthwise: np.ndarray, rows: int) -> int:
    """Scratch floats a fused depthwise + 1x1 convolution tile of at most ``rows`` output rows needs
    (``native/tile_depthwise.c``'s ``pw_dwpw_scratch``): ``row`` the fused layer's row, ``depthwise`` its
    depthwise row (int64, as the binder fills them)."""
    fn = _library().pw_dwpw_scratch
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return int(fn(row.ctypes.data, depthwise.ctypes.data, rows))
