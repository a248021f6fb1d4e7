"""LoRA (Hu et al., 2021) for the backbone's Linear and Conv2d layers, with one adapter per skill.

A LoRA layer is the ordinary layer plus an optional low-rank update passed in at call time:

    y = W x + (alpha / r) * B (A x)        A: (r, in), B: (out, r), B zero-initialised

The adapter is an argument, not state stored in the layer, so the backbone can run any skill's
adapter (or none) without mutation: computing a batch for skill X reads only X's tensors, and
one backbone serves many skills and threads at once. The base weights are not frozen here: they
train during pretraining, and the trainer freezes them (requires_grad=False) for adapter updates.

>>> import torch
>>> layer = LoRALinear(4, 3)
>>> adapter = LoRAAdapter({"fc": layer}, rank=2, alpha=4.0)
>>> x = torch.randn(5, 4)
>>> torch.equal(layer(x, adapter.get("fc")), layer(x))  # B = 0: a fresh adapter is the identity
True
>>> conv = LoRAConv2d(3, 8, 3, padding=1)
>>> low = LoRAAdapter({"conv": conv}, rank=2, alpha=4.0).get("conv")
>>> _ = torch.nn.init.normal_(low.B)
>>> image = torch.randn(2, 3, 6, 6)
>>> two_convs = conv(image) + low.scaling * F.conv2d(F.conv2d(image, low.A, padding=1), low.B)
>>> torch.allclose(conv(image, low), two_convs, atol=1e-5)  # the merged kernel computes the same
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F  # noqa: N812 (the torch idiom)
from torch import nn


class LowRank(nn.Module):
    """One layer's update: A (r, in[, kh, kw]) and B (out, r[, 1, 1]); the delta is scaling * B @ A."""

    def __init__(self, base: nn.Linear | nn.Conv2d, rank: int, alpha: float) -> None:
        super().__init__()
        if isinstance(base, nn.Conv2d):
            a_shape, b_shape = (rank, base.in_channels, *base.kernel_size), (base.out_channels, rank, 1, 1)
        else:
            a_shape, b_shape = (rank, base.in_features), (base.out_features, rank)
        self.A = nn.Parameter(torch.empty(a_shape))
        self.B = nn.Parameter(torch.zeros(b_shape))  # zero: the adapter starts as the identity
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))  # nn.Linear's default init, as in loralib
        self.scaling = alpha / rank


class LoRAAdapter(nn.Module):
    """One skill's low-rank updates for a set of named base layers."""

    def __init__(self, layers: Mapping[str, nn.Linear | nn.Conv2d], rank: int, alpha: float) -> None:
        super().__init__()
        self.layers = nn.ModuleDict({name: LowRank(base, rank, alpha) for name, base in layers.items()})

    def get(self, name: str) -> LowRank | None:
        """The update for layer `name`, or None if this adapter leaves that layer alone."""
        return self.layers[name] if name in self.layers else None  # noqa: SIM401 (ModuleDict has no get)


class LoRALinear(nn.Linear):
    """nn.Linear whose forward adds an optional low-rank update."""

    def forward(self, x: torch.Tensor, lora: LowRank | None = None) -> torch.Tensor:
        y = super().forward(x)  # (..., out)
        if lora is None:
            return y
        return y + lora.scaling * F.linear(F.linear(x, lora.A), lora.B)  # x -> (..., r) -> (..., out)


class LoRAConv2d(nn.Conv2d):
    """nn.Conv2d whose forward adds an optional low-rank update: a rank-r conv, then a 1x1 conv up.

    The two are merged into the kernel (W + scaling * B A, one small einsum) before the convolution:
    one conv per call instead of three, which made a batch-64 expert call 1.8x slower unmerged
    (docs/benchmarks.md, session 37). Gradients reach A and B through the merged kernel.
    """

    def forward(self, x: torch.Tensor, lora: LowRank | None = None) -> torch.Tensor:
        if lora is None:
            return super().forward(x)  # (B, out, H', W')
        delta = torch.einsum("or,rikl->oikl", lora.B[:, :, 0, 0], lora.A)  # (out, in, kh, kw)
        weight = self.weight + lora.scaling * delta
        return F.conv2d(x, weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
