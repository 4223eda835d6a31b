"""V-JEPA 2's video encoder as Hugging Face ``transformers`` builds it: from its configuration, with
random weights (nothing is downloaded; the speed does not depend on the weights), run on a clip.

``VITL16`` is the published default (ViT-L/16: 24 layers, width 1024, MLP 4096, exact GELU, LayerNorm
eps 1e-6, 256x256 crops, tubelets of 2 frames); ``TINY`` keeps its structure at a size the CPU runs.
"""
from __future__ import annotations

import torch

from mage.errors import MageInputError

VITL16: dict = {}  # the configuration class's defaults are the published ViT-L/16
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=4.0, crop_size=32,
            patch_size=16, frames_per_clip=4, tubelet_size=2, pred_hidden_size=32, pred_num_hidden_layers=1,
            pred_num_attention_heads=4)


def build(config: dict, dtype=torch.float32, device="cpu", seed: int = 0):
    """The encoder-and-predictor model in eval mode, weights drawn from ``seed``."""
    try:
        from transformers import VJEPA2Config, VJEPA2Model
    except ImportError as e:  # the model's code is the point: without it there is nothing to measure
        raise MageInputError("vjepa2", "transformers", f"is needed to build the model ({e})") from None
    torch.manual_seed(seed)
    cfg = VJEPA2Config(**config)
    cfg._attn_implementation = "sdpa"  # what users get by default: PyTorch's fused attention
    return VJEPA2Model(cfg).to(device=device, dtype=dtype).eval()


def clip(model, frames: int, batch: int = 1, seed: int = 0, device="cpu"):
    """A random clip [batch, frames, 3, crop, crop] in the model's dtype: pixel values after the video
    processor's normalisation are roughly unit-scale, and normal values are that."""
    cfg = model.config
    if frames < cfg.tubelet_size or frames % cfg.tubelet_size:
        raise MageInputError("vjepa2", "frames", f"must be a positive multiple of the tubelet size {cfg.tubelet_size}, got {frames}")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn((batch, frames, 3, cfg.crop_size, cfg.crop_size), generator=gen)
    return x.to(device=device, dtype=next(model.parameters()).dtype)


def tokens(model, frames: int) -> int:
    """Tokens the encoder sees per clip: (frames / tubelet) x (crop / patch)^2."""
    cfg = model.config
    return (frames // cfg.tubelet_size) * (cfg.crop_size // cfg.patch_size) ** 2


@torch.inference_mode()
def encode(model, video):
    """The encoder's output tokens [batch, tokens, width] (the predictor is skipped: users of the
    encoder's features run only this)."""
    return model(pixel_values_videos=video, skip_predictor=True).last_hidden_state


def rope_attention(model):
    """The model's first rotary attention module (the stock rotation's owner, for timing it alone)."""
    return next(m for m in model.modules() if hasattr(type(m), "apply_rotary_embeddings"))


def swap(model):
    """The project's swap (LayerNorms, and at FP32 the Linears and MLPs) and the fused rotary embedding of
    every attention layer (``rope``); what was replaced and kept, as ``swap.Swapped``."""
    from . import rope
    from .swap import swap as swap_modules
    done = swap_modules(model)
    n = rope.swap_rope(model)
    if n:
        done.replaced["rotary embedding"] += n
    return done
