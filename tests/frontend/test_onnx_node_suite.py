"""Every ONNX backend node test of the installed onnx, through ``pathweave.optimize(path, ...)``:
each one passes or is refused with a pathweave error; a raw exception or a wrong answer fails.

The onnxruntime cross-check is switched off here (``PATHWEAVE_ONNX_CROSSCHECK=0``), so these run as
they would where onnxruntime is not installed: the converters alone must be right.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("onnx")

from tests.frontend.onnx_cases import Outcome, node_cases, run_case, summary  # noqa: E402

CASES = {case.name: case for case in node_cases()}


@pytest.fixture(scope="module")
def results(tmp_path_factory, request):
    """Outcomes by case name; a summary of counts is written at the end of the module."""
    outcomes: dict[str, Outcome] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny graphs: more threads only contend
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PATHWEAVE_ONNX_CROSSCHECK", "0")
            yield outcomes, tmp_path_factory.mktemp("onnx_node_cases")
    finally:
        torch.set_num_threads(threads)
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if capture is not None and outcomes:
        with capture.global_and_fixture_disabled():
            print("\n" + summary(outcomes))


@pytest.mark.parametrize("name", list(CASES))
def test_node_case_passes_or_is_refused(results, name: str) -> None:
    outcomes, folder = results
    outcome = run_case(CASES[name], folder)
    outcomes[name] = outcome
    assert outcome.kind in ("pass", "refused"), f"{name}: {outcome.kind}: {outcome.reason}"


def test_suite_covers_the_installed_onnx() -> None:
    """The generators are there and name each case once; most of the set is real work, not refusals."""
    assert len(CASES) == len(node_cases()) > 1000
