"""Host and hardware adaptation. Every import of comfy.* / folder_paths / server goes through here, at call time."""
