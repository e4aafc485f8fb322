"""Frontend: an nn.Module, ExportedProgram, ``.pt2`` or ``.onnx`` file becomes one whole torch.fx graph
with shapes (``frontend.capture.capture``)."""
