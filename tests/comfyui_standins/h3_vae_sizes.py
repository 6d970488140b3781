"""Host classes built at a chosen width: `sized(module, {"ClassName": {keyword: value}})` replaces each named class in
the host module by one whose constructor defaults are those keywords, for the duration of the block.

Why: the host builds its MiniMax-H3 VAEs with no size arguments (comfy/sd.py: `MiniMaxH3VideoVAE(operations=...)`,
`MiniMaxH3AudioVAE()`), i.e. always at full size (~2e9 parameters for the video decoder), whatever the file holds.
The host's own constructors, detection and VAE wrapper still run; only their default widths change. Shared by the
tiny-model writer (tests/tiny_h3_models.py) and the stand-in loader (this package's TinyH3VAELoader).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from types import ModuleType

_LOCK = threading.Lock()  # the replaced names are module globals: one sized construction at a time


def _with_defaults(cls: type, defaults: dict) -> type:
    class Sized(cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**defaults, **kwargs})

    Sized.__name__ = Sized.__qualname__ = cls.__name__
    return Sized


@contextmanager
def sized(module: ModuleType, sizes: dict[str, dict]):
    with _LOCK:
        originals = {name: getattr(module, name) for name in sizes}
        try:
            for name, defaults in sizes.items():
                setattr(module, name, _with_defaults(originals[name], defaults))
            yield
        finally:
            for name, original in originals.items():
                setattr(module, name, original)
