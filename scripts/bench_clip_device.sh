#!/bin/bash
# The GPU recipe of docs/benchmarks.md ("The clip under VRAM caps"): run on the device machine from a folder that
# holds what the calls carry (wheels unpacked into SITE, the host tree, this pack's tree), steps in order:
#   bench_clip_device.sh setup CARRY   unpack CARRY/*.whl and *.zip into SITE, untar CARRY/comfyui.tar.xz, code.tar.gz
#   bench_clip_device.sh info          machine, disk, memory, packages
#   bench_clip_device.sh probe         issue 31's chain on the GPU (tests/inference_rebind_probe.py --cuda)
#   bench_clip_device.sh bench ARGS    scripts/bench_clip.py --host HOST ARGS (PYTHONUNBUFFERED, SITE on the path)
# Nothing here installs from a registry: the machine has none.
set -u
SITE=${SITE:-/root/clipsite}
ROOT=${CLIP_ROOT:-/root/clip}
HOST=$ROOT/comfyui-0.33.0
CODE=$ROOT/h3kit
PY=${PY:-python3}
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1
step=$1
shift
case $step in
  setup)
    carry=$1
    mkdir -p "$SITE" "$CODE"
    for wheel in "$carry"/*.whl "$carry"/*.zip; do
      [ -e "$wheel" ] && $PY -m zipfile -e "$wheel" "$SITE"  # the machine has no unzip
    done
    [ -e "$carry/comfyui.tar.xz" ] && tar -xJf "$carry/comfyui.tar.xz" -C "$ROOT"
    [ -e "$carry/code.tar.gz" ] && rm -rf "$CODE" && mkdir -p "$CODE" && tar -xzf "$carry/code.tar.gz" -C "$CODE"
    ls "$SITE" | grep -c . ;;
  info)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    df -h / /root /tmp /dev/shm | sed 1d
    free -g | sed -n 2p
    nproc
    $PY -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.backends.cudnn.version())"
    $PY -c "import comfy_kitchen, comfy_aimdo, importlib.metadata as m; print('kitchen', m.version('comfy-kitchen'), 'aimdo', m.version('comfy-aimdo'))" ;;
  probe)
    cd "$HOST" && $PY "$CODE/tests/inference_rebind_probe.py" "$CODE" --cuda 2>&1 | tail -n 3 ;;
  bench)
    cd "$CODE" && $PY scripts/bench_clip.py --host "$HOST" "$@" ;;
  *)
    echo "unknown step $step" >&2
    exit 2 ;;
esac
