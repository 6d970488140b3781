"""H3Kit: ComfyUI nodes for the MiniMax-H3 -> LTX-2.5 two-stage video pipeline. Registration only."""

import os

from .adapters.server_routes import PackNodes, register_routes
from .adapters.turing import apply_turing_fp16_at_startup
from .nodes import DISABLED_NODES, NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS, pack_of

apply_turing_fp16_at_startup()  # Turing: fp16 compute for LTX (inert elsewhere; H3KIT_TURING_FP16=0 opts out)
# POST /h3kit/preflight and the template files, on ComfyUI's server only (inert elsewhere)
register_routes(os.path.basename(os.path.dirname(os.path.abspath(__file__))), PackNodes(DISABLED_NODES, pack_of))

WEB_DIRECTORY = "./web"  # the graph editor's preflight extension (plain JS, no build step)
__version__ = "0.1.0"
__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY", "__version__"]
