"""Builds the native tile runtime (plain C, no libtorch, no Python API: loaded through ctypes).

Everything else about the package is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pathweave.tiles.native._tile_runtime",
            sources=[
                "pathweave/tiles/native/tile_runtime.c",
                "pathweave/tiles/native/tile_kernels.c",
                "pathweave/tiles/native/tile_gemm.c",
                "pathweave/tiles/native/tile_gemm_t.c",
                "pathweave/tiles/native/tile_gemm_b.c",
                "pathweave/tiles/native/tile_pool_s1.c",
                "pathweave/tiles/native/tile_depthwise.c",
                "pathweave/tiles/native/tile_pool_s2.c",
                "pathweave/tiles/native/tile_winograd.c",
                "pathweave/tiles/native/tile_resize.c",
                "pathweave/tiles/native/tile_kernels_seq.c",
                "pathweave/tiles/native/tile_act.c",
                "pathweave/tiles/native/tile_reduce.c",
            ],
            depends=[
                "pathweave/tiles/native/tile_kernels.h",
                "pathweave/tiles/native/tile_gemm.h",
                "pathweave/tiles/native/tile_kernels_seq.h",
                "pathweave/tiles/native/tile_simd.h",
                "pathweave/tiles/native/tile_math.h",
            ],
            # no errno from libm (nothing reads it): sqrtf becomes one vector instruction
            extra_compile_args=["-O3", "-std=c11", "-pthread", "-Wall", "-fno-math-errno"],
            extra_link_args=["-pthread", "-lm"],
        )
    ]
)
