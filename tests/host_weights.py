"""Shared by the tiny-checkpoint writers that run in a ComfyUI host's OWN python (tests/tiny_ltx_models.py,
tests/tiny_h3_models.py): start the host's `comfy` on the CPU, build a host class with whatever constructor
signature that host has, fill its weights with seeded random values, and write a safetensors file.

Never imported by the test process (it imports the host's `comfy`).
"""

from __future__ import annotations

import inspect
import json
import math
import sys
import zlib
from pathlib import Path

import torch


def use_host_on_cpu(comfyui_dir: Path) -> None:
    """Make the host's `comfy` importable and force its CPU mode before model_management is imported: a host whose
    torch is a CUDA build otherwise asks the missing driver for a device ("Found no NVIDIA driver")."""
    sys.path.insert(0, str(comfyui_dir))
    from comfy.cli_args import args

    args.cpu = True


def build(factory, *args, **kwargs):
    """Call a host constructor, passing `operations` only where this host's signature takes it (LatentUpsampler.
    from_config needs it on 0.33.0 and does not accept it on 0.12.1)."""
    import comfy.ops

    if "operations" in inspect.signature(factory).parameters and "operations" not in kwargs:
        kwargs["operations"] = comfy.ops.disable_weight_init
    return factory(*args, **kwargs)


def generator_for(file_name: str, seed: int) -> torch.Generator:
    """One generator per file: a file's bytes depend on its name and the seed only, not on which other files the
    same run writes (writers are asked for different subsets)."""
    return torch.Generator().manual_seed(seed + zlib.crc32(file_name.encode()))


def randomize(module: torch.nn.Module, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Every parameter and float buffer filled (host layers are often built uninitialised): matrices and
    kernels ~ N(0, 1/fan_in), 1-D weights (norms) 1, biases 0, other vectors small noise."""
    state = {}
    for name, tensor in module.state_dict().items():
        if not tensor.is_floating_point():
            state[name] = tensor.clone()
            continue
        if tensor.ndim >= 2:
            fan_in = math.prod(tensor.shape[1:])
            value = torch.randn(tensor.shape, generator=generator) / math.sqrt(fan_in)
        elif name.endswith("bias"):
            value = torch.zeros(tensor.shape)
        elif name.endswith("weight"):
            value = torch.ones(tensor.shape)
        else:
            value = torch.randn(tensor.shape, generator=generator) * 0.1
        state[name] = value.to(torch.float32).contiguous()
    return state


def write(path: Path, state: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata=metadata)


def config_metadata(config: dict) -> dict[str, str]:
    """The safetensors metadata the host's loaders read a model configuration from."""
    return {"config": json.dumps(config)}
