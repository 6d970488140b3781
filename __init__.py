"""H3Kit: ComfyUI nodes for the MiniMax-H3 -> LTX-2.5 two-stage video pipeline. Registration only."""

from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

__version__ = "0.1.0"
__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "__version__"]
