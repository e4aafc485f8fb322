"""channels_last: image inputs that feed convolutions are converted to NHWC once, at the start."""

from __future__ import annotations

import copy

import torch
from torch import nn

from pathweave.frontend.capture import capture
from pathweave.passes import channels_last
from pathweave.passes.channels_last import ToChannelsLast

RTOL, ATOL = 1e-4, 1e-5


class TwoInputs(nn.Module):
    """Only the image input reaches a convolution; the other is added after it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2)

    def forward(self, image: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(image * 2))) + bias


def _capture(model: nn.Module, *shapes: tuple[int, ...]):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        inputs = tuple(torch.randn(*s) for s in shapes)
        return capture(model.eval(), *inputs), inputs


def test_converts_only_the_image_input() -> None:
    captured, inputs = _capture(TwoInputs(), (1, 3, 8, 8), (1, 4, 4, 4))
    matches = channels_last.propose(captured.gm)
    assert matches == [ToChannelsLast("image")]
    gm = copy.deepcopy(captured.gm)
    channels_last.apply(gm, matches)
    gm.graph.lint()
    gm.recompile()
    image = next(n for n in gm.graph.nodes if n.name == "image")
    (clone,) = image.users
    assert clone.target == torch.ops.aten.clone.default
    assert clone.kwargs["memory_format"] == torch.channels_last
    assert len(clone.users) == 1 and next(iter(clone.users)).name.startswith("mul")
    with torch.no_grad():
        (got,), (want,) = gm(*inputs), captured.gm(*inputs)
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


def test_no_conv_no_conversion() -> None:
    captured, _ = _capture(nn.Sequential(nn.MaxPool2d(2), nn.ReLU()), (1, 3, 8, 8))
    assert channels_last.propose(captured.gm) == []


def test_not_four_dimensional() -> None:
    captured, _ = _capture(nn.Conv1d(3, 4, 3), (1, 3, 16))
    assert channels_last.propose(captured.gm) == []


def test_conv_too_far_away_is_not_seen() -> None:
    """Within a few element-wise steps only: six ops between input and conv is too far."""

    class Far(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(6):
                x = x + 1
            return self.conv(x)

    captured, _ = _capture(Far(), (1, 3, 4, 4))
    assert channels_last.propose(captured.gm) == []
