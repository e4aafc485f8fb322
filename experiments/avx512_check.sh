#!/usr/bin/env bash
# Experiment (issue 21, "the AVX-512 figures do not regress"): what to run first on an AVX-512 machine.
#
# Not part of the package or of CI. The last AVX-512 figures are of 2026-11-25 (commit 33cb142, an AMD
# EPYC Zen 5, README "Mobile nets and NASNet", results/*-cpu2.json, results/tiles*). Since then every
# session ran on an AVX2-only Zen 3, and CI there runs only the levels that CPU has, so the 16-lane code
# changed since (listed in docs/tiles.md, "What changed at AVX-512 since 2026-11-25") has not run at all.
# This script: (1) the tile tests at AVX-512; (2) one interleaved bench per model, tiles and the peers;
# (3) paired A/Bs in one process of the changes that apply at AVX-512 and have a switch. Each step
# writes under results/avx512_check/; compare (2) with the 2026-11-25 figures and read (3)'s ratios
# (tiles_ab.py's: patched / current time, the patched strategy without the change: above 1.0 the change
# is faster at AVX-512).
# Run: bash experiments/avx512_check.sh   (about 25 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
grep -q avx512f /proc/cpuinfo || { echo "no AVX-512 on this CPU: nothing to check here" >&2; exit 1; }
out=results/avx512_check
mkdir -p "$out"
PATHWEAVE_ISA=avx512 python -m pytest -q tests/tiles 2>&1 | tail -5 | tee "$out/tests.txt"
for m in resnet50 googlenet inception_v3 densenet121 squeezenet1_0 nasnet_a_mobile mobilenet_v2 efficientnet_b0 \
    mobilevit_xs bert_base; do
    pathweave bench "$m" --candidates pathweave:tiles,pathweave:sequential,ort:seq,openvino --rounds 20 \
        --quiet --json "$out/$m.json" | tee "$out/$m.txt"
done
ab() { python experiments/tiles_ab.py "$@" --rounds 30 2>&1 | tail -3; }
{
    echo "# depthwise flat runs for small maps (4f291f5): patched = off"
    for m in mobilenet_v2 nasnet_a_mobile efficientnet_b0; do ab "$m" c:pw_dw_flat 0; done
    echo "# max pools at half the tiles (6ecc0f1): patched = the full count"
    for m in googlenet inception_v3 resnet50; do ab "$m" pathweave.tiles.build:MAX_POOL_TILE_SHARE 1.0; done
    echo "# packed weights on a cache line (17a9a93): patched = unaligned"
    for m in resnet50 inception_v3; do ab "$m" pathweave.tiles.rows:PACK_ALIGN 0; done
    echo "# 1x1 tiles of >= 64 positions (75b4037): patched = 128, as before"
    for m in mobilenet_v2 resnet50 googlenet; do ab "$m" pathweave.tiles.build:POINTWISE_MIN_COLUMNS 128; done
    echo "# norms, softmaxes and view copies of >= 32768 elements in >= 2 tiles (e90c5e7): patched = off"
    for m in mobilevit_xs bert_base; do ab "$m" pathweave.tiles.build:SHARED_MIN_ELEMENTS 1000000000000; done
} | tee "$out/ab.txt"
