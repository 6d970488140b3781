"""Start a ComfyUI source tree's process-wide settings before torch is imported, as its main.py does.

ComfyUI chooses its CUDA allocator (cuda_malloc.py sets PYTORCH_CUDA_ALLOC_CONF) and starts comfy-aimdo before torch
loads; torch reads the allocator setting once, at its own import. The benches call `start_from_argv` first thing, so
the host runs with the allocator and dynamic-VRAM set-up a user's ComfyUI gets. Imports nothing of torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

STATE: dict = {}


def start(host_dir: Path, argv: list[str], dynamic_vram: bool) -> dict:
    """Parse `argv` with the host's parser, apply its allocator choice and (if asked and the host would) start
    comfy-aimdo. Idempotent: the first call wins."""
    if STATE:
        return STATE
    host_dir = Path(host_dir).resolve()
    if str(host_dir) not in sys.path:
        sys.path.insert(0, str(host_dir))
    saved, sys.argv = sys.argv, ["main.py", *argv]
    try:
        import comfy.options

        comfy.options.enable_args_parsing()
        import cuda_malloc  # noqa: F401 - sets PYTORCH_CUDA_ALLOC_CONF exactly as main.py does
        from comfy.cli_args import args, enables_dynamic_vram
    finally:
        sys.argv = saved  # the bench's own parser reads its command line afterwards

    aimdo = None
    if dynamic_vram and enables_dynamic_vram():
        import comfy_aimdo.control as aimdo

        headroom = None if args.reserve_vram is None else int(args.reserve_vram * 1024 ** 3)
        aimdo.init(simple_vram_headroom=headroom, nvml_pressure=not args.disable_nvml_pressure)
    STATE.update(host_dir=host_dir, argv=argv, args=args, aimdo=aimdo)
    return STATE


def start_from_argv(argv: list[str], dynamic_vram: bool) -> None:
    """`start` for a bench command line that has --host DIR (and --device cpu for a CPU run); no-op without --host."""
    if "--host" not in argv or argv.index("--host") + 1 >= len(argv):
        return
    host_dir = Path(argv[argv.index("--host") + 1])
    cpu = "--device" in argv and argv[argv.index("--device") + 1 : argv.index("--device") + 2] == ["cpu"]
    extra = next((arg.split("=", 1)[1].split() for arg in argv if arg.startswith("--host-args=")), [])
    start(host_dir, (["--cpu"] if cpu else []) + extra, dynamic_vram and not cpu)
