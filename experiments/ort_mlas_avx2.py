"""ONNX Runtime at AVX2 on an AVX-512 CPU, for issue 21's judgement (tiles at AVX2 within 1.05x of the best
of ONNX Runtime and OpenVINO): ORT's MLAS picks its kernels from CPUID once, with no option or variable
to lower them, so on this Zen 5 ORT always ran its AVX-512 kernels against our AVX2 ones.

This script copies the installed onnxruntime package to a cache directory and changes one conditional
jump in the copy's libonnxruntime: the one that enters MLAS's AVX-512F branch when CPUID.7:EBX bit 16 is
set (``if ((Cpuid7[1] & 0x10000) != 0 && (xcr0 & 0xE0) == 0xE0)`` in MLAS's platform.cpp) becomes an
unconditional jump past it. MLAS then keeps what it chose a line before, its AVX2/FMA3 kernels: the
kernels it runs on an AVX2-only CPU (the AVX-VNNI int8 kernels it would pick here are not used by fp32
models). The installed package is not touched. The byte pattern must occur exactly once, else the
script refuses (another ORT build needs a new pattern). The bench reads the patch back
(``pathweave.bench.isa.ort_isa``) and reports ORT's row as avx2.

    python experiments/ort_mlas_avx2.py resnet50 googlenet inception_v3 [--rounds 10]

runs, per model, ``pathweave bench MODEL --isa avx2`` with the patched copy first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pathweave.bench.isa import MLAS_AVX512F_BRANCH

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pathweave" / "ort-mlas-avx2"


def patched_ort() -> Path:
    """The directory to put first on PYTHONPATH: a copy of onnxruntime whose MLAS never takes AVX-512."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        raise SystemExit("onnxruntime is not installed")
    src = Path(spec.origin).parent
    import onnxruntime  # the version only; the patched copy runs in the child process

    dest = CACHE / onnxruntime.__version__
    if (dest / "patched").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest / "onnxruntime", symlinks=True)
    # the Python binding links its own copy of ORT's core (and MLAS) besides libonnxruntime: patch each
    done = []
    for lib in sorted((dest / "onnxruntime" / "capi").glob("*.so*")):
        data = lib.read_bytes()
        found = [m for m in MLAS_AVX512F_BRANCH.finditer(data) if m.group(2) == b"\x74"]
        if len(found) > 1:
            shutil.rmtree(dest)
            raise SystemExit(f"{lib.name}: MLAS's AVX-512F branch pattern found {len(found)} times, not once")
        if found:
            at = found[0].start(2)  # the je opcode
            lib.write_bytes(data[:at] + b"\xeb" + data[at + 1 :])
            done.append(lib.name)
    if not any(name.startswith("onnxruntime_pybind11_state") for name in done):
        shutil.rmtree(dest)
        raise SystemExit("MLAS's AVX-512F branch not found in the Python binding: another ORT build?")
    (dest / "patched").write_text("\n".join(done) + "\n")
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--candidates", default="ort:seq,openvino,pathweave:tiles,pathweave:sequential")
    args = ap.parse_args()
    path = patched_ort()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}
    for model in args.models:
        cmd = [sys.executable, "-m", "pathweave", "bench", model, "--isa", "avx2", "--candidates",
               args.candidates, "--rounds", str(args.rounds)]  # fmt: skip
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, env=env, check=True)


if __name__ == "__main__":
    main()
