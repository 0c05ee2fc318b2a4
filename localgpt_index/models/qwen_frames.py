"""Qwen-family pages as one temporal frame: the same vectors at a fraction of the cost.

A Qwen image processor copies a still image into
every temporal frame, and the vision tower's patch embedding (a Conv3d) then sums over identical
frames. A page goes to the model as one frame, and the patch embedding runs as a product with the
summed kernel: the same vectors at a fraction of the cost. Applied to the loaded network, for
byaldi's ColQwen2 and colpali-engine's Qwen families alike."""

from __future__ import annotations

import numpy as np
from PIL import Image


def patch_embeddings_as_products(net) -> int:
    """Run the Qwen vision towers' patch embedding as the matrix product it is; how many were changed.

    Its Conv3d's kernel equals its stride and each input row is exactly one kernel's worth of
    pixels, so the convolution is a product of the flattened rows with the flattened kernel. oneDNN's
    Conv3d is slow at it: on the CPU, at ColQwen2.5's real width (1,280), 213 ms a page in float32
    against 59 ms for the product (73 against 22 ms in bfloat16), with the same result."""
    import types

    import torch

    changed = 0
    for module in net.modules():
        proj = getattr(module, "proj", None)
        if (isinstance(proj, torch.nn.Conv3d) and hasattr(module, "temporal_patch_size") and proj.kernel_size == proj.stride
                and proj.padding == (0, 0, 0) and proj.dilation == (1, 1, 1) and proj.groups == 1):
            module.forward = types.MethodType(_patch_embedding_product, module)
            changed += 1
    return changed


def _patch_embedding_product(self, hidden_states):
    """Qwen's PatchEmbed.forward, with its Conv3d as a product (see patch_embeddings_as_products);
    rows of one temporal frame (a page: see one_frame_patches) go through the summed kernel."""
    import torch.nn.functional as F

    weight = self.proj.weight
    if self.temporal_patch_size > 1 and hidden_states.shape[-1] * self.temporal_patch_size == weight[0].numel():
        return _one_frame_product(self, hidden_states)
    rows = hidden_states.reshape(-1, weight[0].numel()).to(weight.dtype)
    return F.linear(rows, weight.reshape(weight.shape[0], -1), self.proj.bias)


def _one_frame_product(self, rows):
    """The patch embedding of rows whose temporal frames are all the same: W_1 x + W_2 x = (W_1 + W_2) x.
    The summed kernel is kept in float32 (a sum of two bfloat16 weights is exact there) and the
    product runs in float32, as the convolution accumulates; the result has the dtype the
    convolution's would have."""
    import torch
    import torch.nn.functional as F

    weight, bias = self.proj.weight, self.proj.bias
    key = (weight.data_ptr(), weight.dtype, weight.device)
    if getattr(self, "_one_frame_kernel", (None,))[0] != key:
        self._one_frame_kernel = (key, weight.detach().float().sum(dim=2).reshape(weight.shape[0], -1))
    device = rows.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
    with torch.autocast(device, enabled=False):
        out = F.linear(rows.float(), self._one_frame_kernel[1], None if bias is None else bias.float())
    return out.to(dtype)


def temporal_frames(processor) -> int:
    """How many temporal frames the processor makes of a still image (Qwen: 2, copies of the image)."""
    return int(getattr(processor.image_processor, "temporal_patch_size", 1) or 1)


def first_frame(pixels, frames: int, patch: int):
    """The first temporal frame of Qwen pixel rows (rows, channels x frames x patch x patch)."""
    return pixels.view(pixels.shape[0], -1, frames, patch * patch)[:, :, 0].reshape(pixels.shape[0], -1)


def one_frame_patches(rgb: Image.Image, image_processor):
    """A page already at its grid's size as a Qwen image processor makes it, but with one temporal
    frame: it copies a still image into every frame (14 MB a page in float32, its permuted copy
    most of the processor's time), and the patch embedding then sums over identical frames
    (_one_frame_product). Bit for bit the processor's first frame: the same float32 subtraction
    and division, in its fused mean and std, on the same pixels (tests/test_families.py)."""
    import torch

    patch, merge = image_processor.patch_size, image_processor.merge_size
    pixels = torch.from_numpy(np.array(rgb))
    height, width, channels = pixels.shape
    grid_h, grid_w = height // patch, width // patch
    rows = (
        pixels.view(grid_h // merge, merge, patch, grid_w // merge, merge, patch, channels)
        .permute(0, 3, 1, 4, 6, 2, 5)  # the processor's order of rows, then channel, patch row, patch column
        .reshape(grid_h * grid_w, channels, patch * patch)
    )
    mean = torch.tensor(image_processor.image_mean) * (1.0 / image_processor.rescale_factor)
    std = torch.tensor(image_processor.image_std) * (1.0 / image_processor.rescale_factor)
    return rows.to(torch.float32).sub_(mean[:, None]).div_(std[:, None]).view(grid_h * grid_w, -1)
