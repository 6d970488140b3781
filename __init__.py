"""H3Kit: ComfyUI nodes for the MiniMax-H3 -> LTX-2.5 two-stage video pipeline. Registration only.

The registration runs when ComfyUI first reads NODE_CLASS_MAPPINGS (right after it imports the pack), not when
the package is imported: the command line imports this package too, and its --help, validate and doctor never need
the nodes, so they never pay for torch (tests/test_first_hour.py measures it).
"""

import os
import sys

WEB_DIRECTORY = "./web"  # the graph editor's preflight extension (plain JS, no build step)
__version__ = "0.1.0"
__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY", "__version__"]
_REGISTRY = ("NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS")


def _register() -> None:
    """Import the nodes (torch with them), apply the startup adapters and publish the two mappings."""
    from .adapters.server_routes import PackNodes, register_routes
    from .adapters.turing import apply_turing_fp16_at_startup
    from .nodes import (
        DISABLED_NODES,
        NODE_CLASS_MAPPINGS,
        NODE_DISPLAY_NAME_MAPPINGS,
        log_optional_notes,
        pack_of,
    )

    log_optional_notes()
    apply_turing_fp16_at_startup()  # Turing: fp16 compute for LTX (inert elsewhere; H3KIT_TURING_FP16=0 opts out)
    # POST /h3kit/preflight and the template files, on ComfyUI's server only (inert elsewhere)
    register_routes(os.path.basename(os.path.dirname(os.path.abspath(__file__))), PackNodes(DISABLED_NODES, pack_of))
    globals().update(NODE_CLASS_MAPPINGS=NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS=NODE_DISPLAY_NAME_MAPPINGS)


def __getattr__(name: str):
    """ComfyUI's `hasattr(module, "NODE_CLASS_MAPPINGS")` lands here once; afterwards both are plain attributes."""
    if name not in _REGISTRY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _register()
    return getattr(sys.modules[__name__], name)  # set by _register: found without coming back here
