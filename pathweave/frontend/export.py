"""torch.export (non-strict) -> inference-form ATen graph with parameters as attributes."""

from __future__ import annotations

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from pathweave.frontend.graph import Captured


def export_program(model: torch.nn.Module, args: tuple, kwargs: dict) -> ExportedProgram:
    with torch.no_grad():
        return torch.export.export(model, args, kwargs or None, strict=False)


def _mutates(ep: ExportedProgram) -> bool:
    """Whether the graph holds in-place ops or buffer updates (then it must be functionalized)."""
    if ep.graph_signature.buffers_to_mutate or ep.graph_signature.user_inputs_to_mutate:
        return True
    return any(
        n.op == "call_function" and getattr(getattr(n.target, "_schema", None), "is_mutable", False)
        for n in ep.graph.nodes
    )


def from_exported(ep: ExportedProgram, example: list[torch.Tensor], name: str) -> Captured:
    """Turn lifted weights into attributes; functionalize first only where the graph mutates.

    torch.export's graph is already functional for eval-mode models (``relu``, not ``relu_``), and
    ``run_decompositions`` re-traces the whole model (4 s of NASNet's 6), so it runs only when needed.
    """
    if _mutates(ep):
        ep = ep.run_decompositions({})  # functional now: buffer updates show in the signature
    mutated = dict(ep.graph_signature.buffers_to_mutate)
    if mutated:  # a model that updates its own state per call is not an inference graph
        from pathweave.errors import UnsupportedError

        names = sorted(set(mutated.values()))
        message = (f"{name} updates its buffers {names} when called; pathweave captures inference "
                   "graphs whose state does not change between calls")  # fmt: skip
        raise UnsupportedError(message, names)
    src = ep.graph_module
    root = torch.nn.Module()
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    lifted = _lifted_tensors(ep)
    for node in src.graph.nodes:
        if node.op == "placeholder" and node.name in lifted:
            root.register_buffer(node.name, lifted[node.name], persistent=False)
            env[node] = graph.get_attr(node.name)
            env[node].meta.update(node.meta)
        else:
            env[node] = graph.node_copy(node, lambda n: env[n])
    gm = torch.fx.GraphModule(root, graph, class_name=f"{name}_graph")
    gm.graph.eliminate_dead_code()
    gm.recompile()
    spec = ep.call_spec
    return Captured(gm, spec.in_spec, spec.out_spec, tuple(example), "export", name)


def _lifted_tensors(ep: ExportedProgram) -> dict[str, torch.Tensor]:
    """Placeholder name -> tensor for parameters, buffers and lifted constants."""
    out: dict[str, torch.Tensor] = {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            continue
        target = spec.target
        if spec.kind == InputKind.PARAMETER:
            out[spec.arg.name] = ep.state_dict[target].detach()
        elif spec.kind == InputKind.BUFFER:
            src = ep.state_dict if target in ep.state_dict else ep.constants
            out[spec.arg.name] = src[target].detach()
        else:
            out[spec.arg.name] = ep.constants[target].detach()
    return out
