"""Allocation trackers for the low-VRAM tests and the tier-b stand-in probe (imports only torch).

- `Allocations`: the shapes of every tensor an aten op materialises (a zero-stride expand or a view of a smaller
  storage is not a buffer of that shape and is not recorded).
- `PeakBytes`: the most bytes of storage created inside the block that were alive at once. Each new storage is
  counted when an op returns it and released when its Python storage object dies (storage objects are preserved,
  so the finaliser runs exactly when the memory is freed); storages an op received as input before the block made
  them (weights, the caller's tensors) are never counted. Allocations inside a tensor subclass's own dispatch (a
  comfy-kitchen quantized matmul) are not seen, only what it returns. The peak of a CPU forward is the CPU analogue of `torch.cuda.max_memory_allocated`
  around it, without the allocator's rounding.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class Allocations(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if type(t) is torch.Tensor and t.untyped_storage().nbytes() >= t.numel() * t.element_size():
                self.shapes.append(tuple(t.shape))
                self.ops.append(str(func))
        return out

    def widest(self, last_dim: int) -> list[tuple[int, ...]]:
        return [s for s in self.shapes if s and s[-1] == last_dim]


class PeakBytes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._known: set[int] = set()  # ids of storage objects seen (inputs and our own)
        self._inputs: dict[int, torch.UntypedStorage] = {}  # held so that their ids are never reused

    def _release(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self._known.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for leaf in tree_leaves((args, kwargs)):
            if type(leaf) is torch.Tensor:
                storage = leaf.untyped_storage()
                if id(storage) not in self._known:
                    self._known.add(id(storage))
                    self._inputs[id(storage)] = storage
        out = func(*args, **kwargs)
        for leaf in tree_leaves(out):
            if type(leaf) is not torch.Tensor:
                continue
            storage = leaf.untyped_storage()
            key = id(storage)
            if key in self._known or storage.nbytes() == 0:
                continue
            self._known.add(key)
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._release, key, storage.nbytes())
        return out
