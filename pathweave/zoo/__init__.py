"""Built-in models with seeded random weights and example inputs, plus loaders for other libraries.

Each model lives in its own module that defines two functions::

    def build() -> torch.nn.Module                      # architecture only; weights come from the seed
    def example_inputs(batch: int, small: bool) -> tuple[torch.Tensor, ...]

``small=True`` gives a cheaper input (smaller image or sequence) that the architecture still accepts,
for tests. Nothing is built on import.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch

from pathweave.errors import UnknownModelError


@dataclass(frozen=True)
class ZooModel:
    name: str
    module: str
    summary: str
    reference: str

    def build(self, seed: int = 0) -> torch.nn.Module:
        """The model in eval mode, its weights drawn from ``seed`` without touching the global RNG."""
        mod = importlib.import_module(f"{__name__}.{self.module}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = mod.build()
            _calibrate_norms(model, tuple(mod.example_inputs(CALIBRATION_BATCH, False)))
        return model.eval()

    def example_inputs(self, batch: int = 1, small: bool = False) -> tuple[torch.Tensor, ...]:
        mod = importlib.import_module(f"{__name__}.{self.module}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1234)
            return tuple(mod.example_inputs(batch, small))


#: batch of the one train-mode pass that sets batch-norm statistics
CALIBRATION_BATCH = 2


def _calibrate_norms(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    """Set every batch norm's running statistics from one forward pass on random full-size data.

    With fresh statistics (mean 0, variance 1) and default init, deep CNNs in eval mode shrink their
    signal until the output no longer depends on the input, and any test comparing outputs would pass
    vacuously. One train-mode pass with cumulative averaging keeps activations near unit scale
    (at full size: NASNet's statistics from a small input blow its full-size logits up).
    """
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    saved = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        model(*inputs)
    for m, momentum in zip(norms, saved, strict=True):
        m.momentum = momentum
    model.eval()


MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in [
        ZooModel("googlenet", "googlenet", "GoogLeNet (Inception v1), 224x224", "torchvision googlenet"),
        ZooModel("inception_v3", "inception_v3", "Inception v3, 299x299", "torchvision inception_v3"),
        ZooModel("squeezenet1_0", "squeezenet", "SqueezeNet 1.0, 224x224", "torchvision squeezenet1_0"),
        ZooModel("resnet50", "resnet", "ResNet-50, 224x224", "torchvision resnet50"),
        ZooModel("densenet121", "densenet", "DenseNet-121, 224x224", "torchvision densenet121"),
        ZooModel("vgg16_bn", "vgg", "VGG-16 with batch norm, 224x224", "torchvision vgg16_bn"),
        ZooModel("nasnet_a_mobile", "nasnet", "NASNet-A Mobile 4@1056, 224x224", "timm nasnetamobile"),
        ZooModel("mobilenet_v2", "mobilenet_v2", "MobileNetV2 1.0, 224x224", "torchvision mobilenet_v2"),
        ZooModel("efficientnet_b0", "efficientnet", "EfficientNet-B0 224x224", "torchvision efficientnet_b0"),
        ZooModel("mobilevit_xs", "mobilevit", "MobileViT-XS, 256x256", "Mehta and Rastegari 2021"),
        ZooModel("convnext_tiny", "convnext", "ConvNeXt-T, 224x224", "torchvision convnext_tiny"),
        ZooModel("unet", "unet", "U-Net, 4 levels, 32 base channels, 256x256", "Ronneberger et al. 2015"),
        ZooModel("deepfm", "deepfm", "DeepFM, 39 Criteo fields", "Guo et al. 2017 / DeepCTR"),
        ZooModel("bert_base", "bert", "BERT-base encoder, seq 128", "HF bert-base-uncased config"),
        ZooModel("gpt2", "gpt2", "GPT-2 124M, first iteration, no past, seq 128", "HF gpt2 config"),
    ]
}


def names() -> list[str]:
    return list(MODELS)


def get(name: str) -> ZooModel:
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown zoo model {name!r}; known: {', '.join(MODELS)}; "
            "or use torchvision:NAME, timm:NAME, hf:CONFIG, or a path to a .pt2 file"
        ) from None
