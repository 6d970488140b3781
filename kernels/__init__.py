"""Compute kernels: pure torch / triton, no ComfyUI imports."""
