"""Builds the native tile runtime (plain C, no libtorch, no Python API: loaded through ctypes).

Everything else about the package is in pyproject.toml.
"""

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class ParallelBuildExt(build_ext):
    """Compiles an extension's C files side by side, one per core (setuptools' own ``parallel`` splits
    extensions, and this is one): ~1m50s alone on 2 cores, most of CI's install, ~1m with two."""

    def build_extensions(self) -> None:
        compile_one = self.compiler.compile

        def compile_all(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                objects = list(pool.map(lambda source: compile_one([source], *args, **kwargs), sources))
            return [o for one in objects for o in one]

        self.compiler.compile = compile_all
        super().build_extensions()


setup(
    cmdclass={"build_ext": ParallelBuildExt},
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
