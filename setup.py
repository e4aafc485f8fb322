"""Builds the native tile runtime (plain C, no libtorch, no Python API: loaded through ctypes).

Everything else about the package is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pathweave.execute.native._tile_runtime",
            sources=[
                "pathweave/execute/native/tile_runtime.c",
                "pathweave/execute/native/tile_kernels.c",
                "pathweave/execute/native/tile_gemm.c",
                "pathweave/execute/native/tile_gemm_t.c",
                "pathweave/execute/native/tile_pool_s1.c",
                "pathweave/execute/native/tile_pool_s2.c",
                "pathweave/execute/native/tile_winograd.c",
                "pathweave/execute/native/tile_kernels_seq.c",
            ],
            depends=[
                "pathweave/execute/native/tile_kernels.h",
                "pathweave/execute/native/tile_gemm.h",
                "pathweave/execute/native/tile_kernels_seq.h",
                "pathweave/execute/native/tile_simd.h",
            ],
            extra_compile_args=["-O3", "-std=c11", "-pthread", "-Wall"],
            extra_link_args=["-pthread", "-lm"],
        )
    ]
)
