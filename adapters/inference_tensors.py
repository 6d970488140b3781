"""Parameters left half inference tensor by a device move made outside torch.inference_mode (issue 31).

ComfyUI's executor runs every node under `torch.inference_mode()`, so the loaders build models whose parameters
are inference tensors: no autograd dispatch keys, no version counter. `Module.to(device)` moves a parameter by
assigning the moved copy to `param.data`; done outside inference mode, that copy is an ordinary tensor, and the
parameter takes its autograd dispatch keys while keeping its disabled version counter. ComfyUI itself moves models
outside inference mode when its prompt worker handles `POST /free {"unload_models": true}` (the frontend's "Unload
Models": main.py calls `unload_all_models()` between prompts); the loaders' cached outputs keep those parameters.
Such a parameter works in functional ops, but the first view of it (`table[2:4]`, `weight.t()`) raises
"Inference tensors do not track version counter", inside inference mode too. The legacy model patcher moves a
partially loaded model's resident layers back to the GPU inside inference mode (which re-marks them), but leaves
the non-leaf parameters (LTX-2's `scale_shift_table`s) and the offloaded layers where they are, so a partially
loaded LTX-2 AV block stops at its first `scale_shift_table[indices]` (av_model.py, `get_ada_values`).

`rebind_as_inference` re-marks such parameters and buffers in place: under inference mode it points them at a new
inference tensor over the same storage (no copy, same data pointer, so ComfyUI's pinned-memory records stay valid).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


def counter_detached(tensor: torch.Tensor) -> bool:
    """True for a tensor that has autograd's dispatch keys (not an inference tensor) but no version counter: the
    state in which any view of it raises "Inference tensors do not track version counter"."""
    if tensor.is_inference():
        return False
    try:
        _ = tensor._version
    except RuntimeError:
        return True
    return False


@dataclass
class Rebind:
    """What `rebind_as_inference` did: names re-marked, and names it found detached but cannot re-mark (tensor
    subclasses such as quantized weights, whose storage is not the data)."""

    rebound: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def rebind_as_inference(module: torch.nn.Module) -> Rebind:
    """Re-mark every counter-detached parameter and buffer of `module` as an inference tensor over the same storage."""
    result = Rebind()
    with torch.inference_mode():
        for owner_name, owner in module.named_modules():
            slots = list(owner._parameters.items()) + list(owner._buffers.items())
            for name, tensor in slots:
                if tensor is None or not counter_detached(tensor):
                    continue
                full = f"{owner_name}.{name}" if owner_name else name
                if type(tensor) not in PLAIN_TYPES:
                    result.skipped.append(f"{full} ({type(tensor).__name__})")
                    continue
                fresh = torch.empty((0,), dtype=tensor.dtype, device=tensor.device)
                fresh.set_(tensor.untyped_storage(), tensor.storage_offset(), tensor.shape, tensor.stride())
                tensor.data = fresh
                result.rebound.append(full)
    return result
