"""H3Kit: ComfyUI nodes for the MiniMax-H3 -> LTX-2.5 two-stage video pipeline. Registration only."""

from .adapters.turing import apply_turing_fp16_at_startup
from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

apply_turing_fp16_at_startup()  # Turing: fp16 compute for LTX (inert elsewhere; H3KIT_TURING_FP16=0 opts out)

__version__ = "0.1.0"
__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "__version__"]
