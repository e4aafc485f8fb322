"""Experiment (issue 20 acceptance): strategy "tiles" on models pathweave has not seen, as a user brings them.

Not part of the package. ``hf_coverage.py`` checks 12 transformers architectures; this script checks
others (BERT, GPT-2, T5/BART, DeBERTa-v2, Mistral, Phi, Gemma, GPT-NeoX, BEiT, DeiT, DINOv2, SegFormer,
ConvNeXt-V2, EfficientNet, MobileNet-V1, PoolFormer, LeViT, CvT, BiT, DPT, GLPN, wav2vec2, HuBERT, the
Whisper encoder, CLIP vision, YOLOS) and ten small hand-written torch models (Inception block with SiLU,
pre-norm ``nn.TransformerEncoder`` with a padding mask from lengths, ``torch.where`` masks, embeddings
with position-id arithmetic, GroupNorm CNN, LeakyReLU/Hardswish CNN, a U-Net with ConvTranspose2d and
bilinear interpolation, a Conv1d net, reductions, channels_last input).

Each model: small config, random weights (seed 0; batch norms calibrated by one train-mode pass where
the model has them, else the output of deep CNNs collapses and any comparison passes vacuously),
batch 1, ``torch.export`` -> ``OUT/<name>.pt2``; pathweave loads the file from its path. Per model, in
a subprocess of its own (a crash in native code costs only that model):

1. ``pathweave.optimize(path, x, strategy="tiles")``: builds? runs? matches eager (the nn.Module, not the
   exported program)? what it built (whole or islands), its coverage (FLOP share in tiles, the ops left
   outside with counts, their FLOPs and the reasons the plan gives), raw (non-pathweave) exceptions;
2. ``pathweave.optimize(path, x)`` (auto): its pick and ``auto_times_ms``, under the bench lock.

Run: ``python experiments/hf_heldout.py [--only bert,gpt2] [--out /tmp/pw-heldout]``.
Writes ``OUT/hf_heldout.md`` and ``OUT/hf_heldout.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import re
import subprocess
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # this checkout's pathweave, not an installed one
from hf_coverage import Wrap, _first_line, _ids, _image, machine, uptime  # noqa: E402

LOCK = "/tmp/pw-bench.lock"
#: how long auto waits for the bench lock before its timing is deferred
LOCK_WAIT_S = 60.0
#: relative tolerance against the eager output's scale (max |y|)
RTOL = 1e-3
#: an eager output whose scale is below this has collapsed: the comparison is relative and flagged
COLLAPSED = 1e-4

Spec = tuple[Callable[[], nn.Module], torch.Tensor, str]


# ---------------------------------------------------------------- transformers models


def _hf(cfg_cls: str, model_cls: str, key: str, kw: dict, x: torch.Tensor, sub: str = "") -> Spec:
    """A transformers model from a config; ``sub`` names a method giving the part to run (``get_encoder``)."""

    def make() -> nn.Module:
        import transformers

        model = getattr(transformers, model_cls)(getattr(transformers, cfg_cls)(**kw))
        if sub:
            model = getattr(model, sub)()
        return Wrap(model.eval(), key)

    return make, x, f"{model_cls}" + (f".{sub}()" if sub else "")


def _audio(n: int = 16000) -> torch.Tensor:
    return torch.randn(1, n, generator=torch.Generator().manual_seed(1234))


def hf_specs() -> dict[str, Spec]:
    bert = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
    dec = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=1000, use_cache=False)  # fmt: skip
    ids, img = _ids(1000, 32), _image(64)
    wav = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
               conv_dim=(32,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)  # fmt: skip
    return {
        "bert": _hf("BertConfig", "BertModel", "last_hidden_state", dict(vocab_size=1000, **bert), ids),
        "gpt2": _hf(
            "GPT2Config",
            "GPT2LMHeadModel",
            "logits",
            dict(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_positions=128, use_cache=False),
            ids,
        ),
        "t5-encoder": _hf(
            "T5Config",
            "T5EncoderModel",
            "last_hidden_state",
            dict(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4),
            ids,
        ),
        "bart": _hf(
            "BartConfig",
            "BartModel",
            "last_hidden_state",
            dict(
                vocab_size=1000,
                d_model=128,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=256,
                decoder_ffn_dim=256,
                max_position_embeddings=128,
                use_cache=False,
            ),
            ids,
        ),
        "electra": _hf(
            "ElectraConfig",
            "ElectraModel",
            "last_hidden_state",
            dict(vocab_size=1000, embedding_size=64, **bert),
            ids,
        ),
        "deberta-v2": _hf(
            "DebertaV2Config",
            "DebertaV2Model",
            "last_hidden_state",
            dict(
                vocab_size=1000,
                max_position_embeddings=128,
                relative_attention=True,
                pos_att_type=["p2c", "c2p"],
                position_buckets=32,
                **bert,
            ),
            ids,
        ),
        "mistral": _hf(
            "MistralConfig", "MistralForCausalLM", "logits", dict(dec, sliding_window=32), _ids(1000, 64)
        ),
        "phi": _hf("PhiConfig", "PhiForCausalLM", "logits", dec, _ids(1000, 64)),
        "gemma": _hf("GemmaConfig", "GemmaForCausalLM", "logits", dict(dec, head_dim=64), _ids(1000, 64)),
        "gpt_neox": _hf(
            "GPTNeoXConfig",
            "GPTNeoXForCausalLM",
            "logits",
            dict(
                vocab_size=1000,
                hidden_size=256,
                intermediate_size=512,
                num_hidden_layers=2,
                num_attention_heads=4,
                use_cache=False,
            ),
            _ids(1000, 64),
        ),
        "beit": _hf(
            "BeitConfig",
            "BeitModel",
            "last_hidden_state",
            dict(image_size=64, patch_size=8, use_relative_position_bias=True, **bert),
            img,
        ),
        "deit": _hf(
            "DeiTConfig", "DeiTModel", "last_hidden_state", dict(image_size=64, patch_size=8, **bert), img
        ),
        "dinov2": _hf(
            "Dinov2Config", "Dinov2Model", "last_hidden_state", dict(image_size=64, patch_size=8, **bert), img
        ),
        "segformer": _hf(
            "SegformerConfig",
            "SegformerForSemanticSegmentation",
            "logits",
            dict(
                depths=[1, 1, 1, 1],
                hidden_sizes=[16, 32, 64, 128],
                decoder_hidden_size=64,
                num_attention_heads=[1, 2, 4, 8],
                num_labels=8,
            ),
            img,
        ),
        "convnextv2": _hf(
            "ConvNextV2Config",
            "ConvNextV2Model",
            "last_hidden_state",
            dict(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1], image_size=64),
            img,
        ),
        "efficientnet": _hf(
            "EfficientNetConfig",
            "EfficientNetModel",
            "last_hidden_state",
            dict(image_size=64, width_coefficient=0.5, depth_coefficient=0.5, hidden_dim=640),
            img,
        ),
        "mobilenet_v1": _hf(
            "MobileNetV1Config",
            "MobileNetV1Model",
            "last_hidden_state",
            dict(image_size=96, depth_multiplier=0.5),
            _image(96),
        ),
        "poolformer": _hf(
            "PoolFormerConfig",
            "PoolFormerModel",
            "last_hidden_state",
            dict(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1]),
            img,
        ),
        "levit": _hf(
            "LevitConfig",
            "LevitModel",
            "last_hidden_state",
            dict(
                image_size=64,
                hidden_sizes=[64, 128, 192],
                key_dim=[16, 16, 16],
                num_attention_heads=[2, 4, 6],
                depths=[1, 1, 1],
            ),
            img,
        ),
        "cvt": _hf(
            "CvtConfig",
            "CvtModel",
            "last_hidden_state",
            dict(embed_dim=[32, 64, 128], num_heads=[1, 2, 4], depth=[1, 2, 3]),
            img,
        ),
        "bit": _hf(
            "BitConfig",
            "BitModel",
            "last_hidden_state",
            dict(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], num_groups=8),
            img,
        ),
        "dpt": _hf(
            "DPTConfig",
            "DPTForDepthEstimation",
            "predicted_depth",
            dict(
                image_size=64,
                patch_size=8,
                backbone_out_indices=[0, 1, 2, 3],
                neck_hidden_sizes=[16, 32, 64, 64],
                fusion_hidden_size=32,
                **dict(bert, num_hidden_layers=4),
            ),
            img,
        ),
        "glpn": _hf(
            "GLPNConfig",
            "GLPNForDepthEstimation",
            "predicted_depth",
            dict(
                depths=[1, 1, 1, 1],
                hidden_sizes=[16, 32, 64, 128],
                num_attention_heads=[1, 2, 4, 8],
                decoder_hidden_size=32,
            ),
            img,
        ),
        "wav2vec2": _hf("Wav2Vec2Config", "Wav2Vec2Model", "last_hidden_state", wav, _audio()),
        "hubert": _hf("HubertConfig", "HubertModel", "last_hidden_state", wav, _audio()),
        "whisper-encoder": _hf(
            "WhisperConfig",
            "WhisperModel",
            "last_hidden_state",
            dict(
                d_model=128,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=4,
                decoder_attention_heads=4,
                encoder_ffn_dim=256,
                decoder_ffn_dim=256,
                num_mel_bins=80,
                max_source_positions=250,
            ),
            torch.randn(1, 80, 500, generator=torch.Generator().manual_seed(1234)),
            sub="get_encoder",
        ),
        "clip-vision": _hf(
            "CLIPVisionConfig",
            "CLIPVisionModel",
            "last_hidden_state",
            dict(image_size=64, patch_size=8, **bert),
            img,
        ),
        "yolos": _hf(
            "YolosConfig",
            "YolosModel",
            "last_hidden_state",
            dict(image_size=[64, 64], patch_size=8, num_detection_tokens=10, **bert),
            img,
        ),
    }


# ---------------------------------------------------------------- hand-written models


def _bn_relu(cin: int, cout: int, k: int, act: nn.Module | None = None, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout), act or nn.ReLU()
    )


class Inception(nn.Module):
    """Four branches (1x1; 1x1-3x3; 1x1-5x5; maxpool-1x1) concatenated, SiLU activations, twice."""

    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.stem = _bn_relu(3, c, 3, nn.SiLU(), stride=2)
        self.blocks = nn.ModuleList([self._block(c) for _ in range(2)])
        self.head = nn.Linear(c, 10)

    @staticmethod
    def _block(c: int) -> nn.ModuleList:
        q = c // 4
        return nn.ModuleList([
            _bn_relu(c, q, 1, nn.SiLU()),
            nn.Sequential(_bn_relu(c, q, 1, nn.SiLU()), _bn_relu(q, q, 3, nn.SiLU())),
            nn.Sequential(_bn_relu(c, q, 1, nn.SiLU()), _bn_relu(q, q, 5, nn.SiLU())),
            nn.Sequential(nn.MaxPool2d(3, 1, 1), _bn_relu(c, q, 1, nn.SiLU())),
        ])  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = torch.cat([b(x) for b in block], dim=1) + x
        return self.head(x.flatten(2).mean(-1))


class PreNormEncoder(nn.Module):
    """A pre-norm ``nn.TransformerEncoder`` with a key padding mask built from a lengths tensor."""

    def __init__(self, d: int = 128, vocab: int = 1000) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 256, dropout=0.0, batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.register_buffer("lengths", torch.tensor([27]))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pad = torch.arange(ids.shape[1], device=ids.device)[None, :] >= self.lengths[:, None]
        return self.enc(self.emb(ids), src_key_padding_mask=pad)


class WhereMasks(nn.Module):
    """Leaky activation and causal attention masking written with ``torch.where``."""

    def __init__(self, d: int = 128) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.where(x > 0, x, 0.1 * x)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        s = q @ k.transpose(-1, -2) / 11.3
        n = x.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        s = torch.where(causal, s, torch.full_like(s, float("-inf")))
        y = self.out(s.softmax(-1) @ v)
        return torch.where(y.abs() > 1.0, y.sign(), y)


class EmbedPositions(nn.Module):
    """Token + position embeddings, position ids from ``arange`` plus an offset (as RoBERTa's padding)."""

    def __init__(self, d: int = 128, vocab: int = 1000) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(130, d)
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, 16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0) + 2
        h = self.norm(self.tok(ids) + self.pos(pos))
        h = h + self.mlp(h)
        return self.head(h)


class GroupNormCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        chans = [3, 32, 64, 64, 128]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(chans, chans[1:], strict=False)):
            layers += [nn.Conv2d(a, b, 3, 2 if i else 1, 1), nn.GroupNorm(8, b), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.body(x), 1).flatten(1))


class LeakyHardswishCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            _bn_relu(3, 32, 3, nn.LeakyReLU(0.1), 2), _bn_relu(32, 64, 3, nn.Hardswish()),
            _bn_relu(64, 64, 3, nn.LeakyReLU(0.2), 2), _bn_relu(64, 128, 3, nn.Hardswish()),
            nn.Conv2d(128, 128, 3, 1, 1, groups=128), nn.Hardsigmoid(),
        )  # fmt: skip
        self.head = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).mean((2, 3)))


class UNetish(nn.Module):
    """Two levels down, up again by ConvTranspose2d and by bilinear interpolation, skips concatenated."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.d1, self.d2 = _bn_relu(3, c, 3), _bn_relu(c, 2 * c, 3, stride=2)
        self.d3 = _bn_relu(2 * c, 4 * c, 3, stride=2)
        self.up1 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.u1 = _bn_relu(4 * c, 2 * c, 3)
        self.u2 = _bn_relu(3 * c, c, 3)
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.d1(x)
        b = self.d2(a)
        c = self.d3(b)
        b = self.u1(torch.cat([self.up1(c), b], 1))
        up = F.interpolate(b, size=a.shape[-2:], mode="bilinear", align_corners=False)
        return self.out(self.u2(torch.cat([up, a], 1)))


class Conv1dNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(1, 32, 9, 4, 4), nn.BatchNorm1d(32), nn.ReLU(),
            nn.Conv1d(32, 64, 5, 2, 2), nn.BatchNorm1d(64), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(64, 64, 3, 1, 2, dilation=2), nn.BatchNorm1d(64), nn.GELU(),
            nn.Conv1d(64, 128, 3, 2, 1, groups=4), nn.ReLU(), nn.AdaptiveAvgPool1d(1),
        )  # fmt: skip
        self.head = nn.Linear(128, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x.unsqueeze(1)).flatten(1))


class Reductions(nn.Module):
    """Pooling by hand: ``mean`` over a dim, ``amax``, ``var``, a normalisation by them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1))
        self.head = nn.Linear(3 * 64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        h = (h - h.mean(dim=1, keepdim=True)) / (h.var(dim=1, keepdim=True) + 1e-5).sqrt()
        feats = [h.mean(dim=(2, 3)), h.amax(dim=(2, 3)), h.flatten(2).var(dim=-1, unbiased=False)]
        return self.head(torch.cat(feats, dim=1))


class ChannelsLast(nn.Module):
    """A residual CNN whose weights and input are channels_last, as a user tuning for oneDNN would."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = _bn_relu(3, 32, 3, stride=2)
        self.b1 = nn.Sequential(_bn_relu(32, 32, 3), nn.Conv2d(32, 32, 3, 1, 1), nn.BatchNorm2d(32))
        self.down = _bn_relu(32, 64, 3, stride=2)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = F.relu(self.b1(x) + x)
        return self.head(self.down(x).mean((2, 3)))


def hand_specs() -> dict[str, Spec]:
    img = _image(64)
    ids = _ids(1000, 32)

    def cl() -> nn.Module:
        return ChannelsLast().to(memory_format=torch.channels_last)

    return {
        "hand-inception-silu": (Inception, img, "Inception block x2, SiLU, BN"),
        "hand-prenorm-encoder": (
            PreNormEncoder,
            ids,
            "nn.TransformerEncoder norm_first, padding mask from lengths",
        ),
        "hand-where-masks": (
            WhereMasks,
            torch.randn(1, 64, 128, generator=torch.Generator().manual_seed(1)),
            "torch.where leaky act + causal mask",
        ),
        "hand-embed-positions": (EmbedPositions, ids, "Embedding + arange+2 position ids"),
        "hand-groupnorm-cnn": (GroupNormCNN, img, "Conv-GroupNorm-ReLU x4"),
        "hand-leaky-hardswish": (LeakyHardswishCNN, img, "LeakyReLU/Hardswish/Hardsigmoid, depthwise"),
        "hand-unet": (UNetish, img, "ConvTranspose2d + F.interpolate bilinear + skips"),
        "hand-conv1d": (Conv1dNet, _audio(4000), "Conv1d stack (stride, dilation, groups), (1, 4000)"),
        "hand-reductions": (Reductions, img, "mean(dim) / amax / var"),
        "hand-channels-last": (
            cl,
            img.contiguous(memory_format=torch.channels_last),
            "channels_last model+input",
        ),
    }


def all_specs() -> dict[str, Spec]:
    return {**hf_specs(), **hand_specs()}


# ---------------------------------------------------------------- probes (one model, in its own process)


@contextlib.contextmanager
def bench_lock(wait_s: float) -> Iterator[bool]:
    """The bench lock, or False after ``wait_s`` seconds (a long bench of another agent holds it: auto's
    timing is then deferred to ``--auto-only`` rather than run beside that bench)."""
    with open(LOCK, "a") as fh:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    yield False
                    return
                time.sleep(1.0)
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _fail(exc: BaseException, stage: str) -> dict:
    from pathweave.errors import PathweaveError

    return {f"{stage}_error": _first_line(exc), f"{stage}_raw": not isinstance(exc, PathweaveError),
            f"{stage}_traceback": "".join(traceback.format_exception(exc)[-8:])}  # fmt: skip


def make(name: str, spec: Spec, out: Path) -> tuple[nn.Module, torch.Tensor, Path, object, dict]:
    """The model (seed 0; batch norms calibrated), its input, the saved ``.pt2`` and notes."""
    from pathweave.zoo import _calibrate_norms

    factory, x, config = spec
    notes: dict = {"config": config}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = factory().eval()
        if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
            _calibrate_norms(model, (torch.randn(4, *x.shape[1:]).to(memory_format=_fmt(x)),))
            notes["bn_calibrated"] = True
    with torch.no_grad():
        ep = torch.export.export(model, (x,))
    path = out / f"{name}.pt2"
    torch.export.save(ep, path)
    return model, x, path, ep, notes


def _fmt(x: torch.Tensor) -> torch.memory_format:
    return torch.channels_last if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and \
        not x.is_contiguous() else torch.contiguous_format  # fmt: skip


def _outside_detail(s: object) -> dict:
    """FLOPs and reasons of the nodes an IslandsStrategy left to ATen, by op."""
    from pathweave.tiles.islands import flops

    plan = getattr(s, "plan", None)
    if plan is None:
        return {}
    nodes = {n.name: n for n in s.gm.graph.nodes}
    by_op: dict[str, dict] = defaultdict(lambda: {"n": 0, "flops": 0, "reasons": Counter()})
    for name, why in plan.outside.items():
        node = nodes.get(name)
        op = str(getattr(node.target, "__name__", node.target)) if node is not None else "?"
        d = by_op[op]
        d["n"] += 1
        d["flops"] += flops(node) if node is not None else 0
        d["reasons"][why[:160]] += 1
    ordered = sorted(by_op.items(), key=lambda kv: -kv[1]["flops"])
    detail = {
        op: {"n": d["n"], "flops": d["flops"], "reasons": dict(d["reasons"].most_common(3))}
        for op, d in ordered
    }
    return {"total_flops": plan.total_flops, "outside_detail": detail}


def probe_tiles(path: object, x: torch.Tensor, ref: torch.Tensor) -> dict:
    import pathweave

    row: dict = {"tiles_builds": False, "tiles_runs": False}
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s = pathweave.optimize(path, x, strategy="tiles")
        row["warnings"] = sorted({str(w.message).splitlines()[0][:300] for w in caught})
    except Exception as exc:  # noqa: BLE001 - the point is to record any failure
        return {**row, **_fail(exc, "build")}
    row.update(tiles_builds=True, build_s=round(time.perf_counter() - t0, 2), built=type(s).__name__)
    cov = getattr(s, "coverage", None)
    row.update(share=cov.share, islands=cov.islands, outside=dict(cov.outside)) if cov is not None else \
        row.update(share=1.0, islands=1, outside={})  # fmt: skip
    row.update(_outside_detail(s))
    try:
        with torch.no_grad():
            y = s(x)
            y2 = s(x)  # a second call: state left by the first must not change the result
        y = y[0] if isinstance(y, (tuple, list)) else y
        y2 = y2[0] if isinstance(y2, (tuple, list)) else y2
        scale = float(ref.abs().max())
        diff = float((y.float() - ref.float()).abs().max())
        row.update(tiles_runs=True, max_abs_diff=diff, ref_scale=scale, rel_diff=diff / max(scale, 1e-30),
                   second_call_diff=float((y2 - y).abs().max()), collapsed=scale < COLLAPSED,
                   matches=bool(diff <= RTOL * max(scale, 1e-30)) and y.shape == ref.shape,
                   finite=bool(torch.isfinite(y).all()) == bool(torch.isfinite(ref).all()))  # fmt: skip
    except Exception as exc:  # noqa: BLE001
        row.update(_fail(exc, "run"))
    s.close() if hasattr(s, "close") else None
    return row


def probe_auto(path: object, x: torch.Tensor, wait_s: float = LOCK_WAIT_S) -> dict:
    import pathweave

    try:
        with bench_lock(wait_s) as locked, warnings.catch_warnings(record=True) as caught:
            if not locked:
                return {"auto_deferred": f"bench lock busy for {wait_s:.0f} s"}
            warnings.simplefilter("always")
            before = uptime()
            s = pathweave.optimize(path, x)
            after = uptime()
    except Exception as exc:  # noqa: BLE001
        return _fail(exc, "auto")
    times = dict(getattr(s, "auto_times_ms", {}))
    pick = getattr(s, "label", type(s).__name__)
    seq = next((v for k, v in times.items() if k.startswith("sequential")), None)
    said = sorted({str(w.message).splitlines()[0][:200] for w in caught if "auto" in str(w.message)})
    slower = None if seq is None else times.get(pick, 0) > seq
    res = {"auto_picks": pick, "auto_times_ms": times, "auto_load": f"{before} / {after}",
           "auto_warnings": said, "auto_pick_slower_than_seq": slower}  # fmt: skip
    s.close() if hasattr(s, "close") else None
    return res


def one(name: str, out: Path, auto_only: bool = False) -> dict:
    """Export, then the probes on the file by its path; where pathweave's loader refuses the file, the
    refusal is recorded and the probes run on the exported program in memory."""
    import pathweave
    from pathweave.frontend.pt2 import load_pt2

    row: dict = {"pathweave": pathweave.__file__}
    try:
        model, x, path, ep, notes = make(name, all_specs()[name], out)
        row.update(notes)
    except Exception as exc:  # noqa: BLE001 - the model's own export failed: not pathweave's
        return {**row, **_fail(exc, "export"), "skipped": "export failed (transformers/torch)"}
    with torch.no_grad():
        ref = model(x)
    arg: object = str(path)
    try:
        load_pt2(path)
    except Exception as exc:  # noqa: BLE001
        row.update(_fail(exc, "load"), pt2_refused=True)
        arg = ep
    if auto_only:
        return probe_auto(arg, x, wait_s=3600.0)
    row.update(probe_tiles(arg, x, ref))
    row.update(probe_auto(arg, x))
    return row


# ---------------------------------------------------------------- the table


def _short(r: dict) -> tuple[str, str]:
    if "skipped" in r:
        return "SKIP (export)", "-"
    pre = "[.pt2 REFUSED; in memory] " if r.get("pt2_refused") else ""
    if not r.get("tiles_builds"):
        return pre + f"NO build: {r.get('build_error', '?')[:90]}" + (
            " [raw]" if r.get("build_raw") else ""
        ), "-"
    if not r.get("tiles_runs"):
        return pre + f"NO run: {r.get('run_error', '?')[:90]}" + (" [raw]" if r.get("run_raw") else ""), "-"
    m = "yes" if r["matches"] else "NO"
    m += f" ({r['max_abs_diff']:.1e} / {r['ref_scale']:.1e})"
    return pre + "yes", m + (" COLLAPSED" if r["collapsed"] else "")


def table(rows: dict[str, dict]) -> str:
    head = (
        "| model | config | tiles builds/runs? | matches? (max abs diff / scale) | built as | FLOP share "
        "| ops outside (counts) | outside MFLOP | auto picks | auto_times_ms | pick slower than seq? |"
    )
    lines = [head, "|" + "---|" * 11]
    for name, r in rows.items():
        runs, match = _short(r)
        built = {"IslandsStrategy": f"islands {r.get('islands')}", "TilesStrategy": "whole"}.get(
            r.get("built", "-"), r.get("built", "-")
        )
        share = f"{100 * r['share']:.1f}%" if "share" in r else "-"
        outside = ", ".join(f"{op} x{n}" for op, n in r.get("outside", {}).items()) or "none"
        out_mf = (
            f"{(1 - r['share']) * r['total_flops'] / 1e6:.1f}"
            if "total_flops" in r
            else ("0" if "share" in r else "-")
        )
        times = ", ".join(f"{k} {v:.2f}" for k, v in r.get("auto_times_ms", {}).items())
        pick = r.get("auto_picks") or (
            "deferred" if "auto_deferred" in r else f"error: {r.get('auto_error', '-')}"
        )
        slower = {None: "-", True: "YES", False: "no"}[r.get("auto_pick_slower_than_seq")]
        lines.append(
            f"| {name} | {r.get('config', '')} | {runs} | {match} | {built} | {share} | {outside} | "
            f"{out_mf} | {pick} | {times} | {slower} |"
        )
    return "\n".join(lines)


def aggregate(rows: dict[str, dict]) -> str:
    """Across models: each op left outside the tiles, in how many models, with how many FLOPs, and the
    reasons the plans gave; then the failures (refused files, builds, runs, mismatches) by message."""
    ops: dict[str, dict] = defaultdict(lambda: {"models": set(), "n": 0, "flops": 0, "reasons": Counter()})
    for name, r in rows.items():
        for op, d in r.get("outside_detail", {}).items():
            a = ops[op]
            a["models"].add(name)
            a["n"] += d["n"]
            a["flops"] += d["flops"]
            a["reasons"].update(d["reasons"])
    lines = [
        "| op left outside | models | nodes | MFLOP outside (sum) | reasons (top 2) |",
        "|---|---|---|---|---|",
    ]
    for op, a in sorted(ops.items(), key=lambda kv: (-len(kv[1]["models"]), -kv[1]["flops"])):
        why = "; ".join(f"{k} (x{v})" for k, v in a["reasons"].most_common(2))
        lines.append(f"| {op} | {len(a['models'])} | {a['n']} | {a['flops'] / 1e6:.2f} | {why} |")
    fails: dict[str, list[str]] = defaultdict(list)
    for name, r in rows.items():
        for stage in ("export", "load", "build", "run", "auto"):
            if f"{stage}_error" in r:
                raw = " [raw]" if r.get(f"{stage}_raw") else ""
                msg = re.sub(r"\S+\.pt2", "<file>.pt2", r[f"{stage}_error"])[:160]
                fails[f"{stage}{raw}: {msg}"].append(name)
        if r.get("tiles_runs") and not r.get("matches"):
            fails["mismatch with eager"].append(name)
        if r.get("tiles_runs") and r.get("share", 1.0) < 0.9:
            fails["under 90% of FLOPs in tiles"].append(name)
        if r.get("auto_pick_slower_than_seq"):
            fails["auto pick slower than sequential"].append(name)
    lines += ["", "| failure | models | which |", "|---|---|---|"]
    for msg, names in sorted(fails.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"| {msg} | {len(names)} | {', '.join(names)} |")
    return "\n".join(lines)


def report(rows: dict[str, dict], out: Path) -> str:
    specs = all_specs()
    ordered = {n: rows[n] for n in specs if n in rows}
    text = f"{machine()}\n\n{table(ordered)}\n\n{aggregate(ordered)}\n"
    (out / "hf_heldout.md").write_text(text)
    return text


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", help="comma-separated model names")
    p.add_argument("--out", type=Path, default=Path("/tmp/pw-heldout"))
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--report", action="store_true", help="only write the table from OUT/hf_heldout.json")
    p.add_argument("--auto-only", action="store_true", help="only auto's timing (deferred ones by default)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.one:
        (args.out / f"row_{args.one}.json").write_text(
            json.dumps(one(args.one, args.out, args.auto_only), default=str, indent=1)
        )
        return
    if args.report:
        print(report(json.loads((args.out / "hf_heldout.json").read_text()), args.out))
        return
    specs = all_specs()
    results = args.out / "hf_heldout.json"
    rows: dict[str, dict] = json.loads(results.read_text()) if results.exists() else {}
    deferred = [n for n, r in rows.items() if "auto_deferred" in r]
    names = args.only.split(",") if args.only else deferred if args.auto_only else list(specs)
    for name in names:
        print(f"== {name} (load {uptime()}) {time.strftime('%H:%M:%S')}", flush=True)
        row_path = args.out / f"row_{name}.json"
        row_path.unlink(missing_ok=True)
        t0 = time.perf_counter()
        try:
            cmd = [sys.executable, __file__, "--one", name, "--out", str(args.out)]
            cmd += ["--auto-only"] if args.auto_only else []
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            rc, tail = proc.returncode, (proc.stderr or "")[-3000:]
        except subprocess.TimeoutExpired:
            rc, tail = "timeout", ""
        if row_path.exists() and args.auto_only:
            row = {k: v for k, v in rows.get(name, {}).items() if k != "auto_deferred"}
            row.update(json.loads(row_path.read_text()))
        elif row_path.exists():
            row = json.loads(row_path.read_text())
        else:  # the process died: a crash (signal), a timeout or an uncaught error
            row = {"config": specs[name][2], "tiles_builds": False, "build_error": f"process died (rc {rc})",
                   "build_raw": True, "build_traceback": tail}  # fmt: skip
        row["auto_wall_s" if args.auto_only else "wall_s"] = round(time.perf_counter() - t0, 1)
        rows[name] = row
        print(
            json.dumps({k: v for k, v in row.items() if not k.endswith("traceback")}, default=str), flush=True
        )
        results.write_text(json.dumps(rows, indent=1, default=str))
    print(report(rows, args.out))


if __name__ == "__main__":
    main()
