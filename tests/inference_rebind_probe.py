"""Run inside a real ComfyUI host's python (cwd = the host checkout), on CPU: issue 31's capped-run failure on the
host's own LTX-2 audio-video model and its own ModelPatcher, and H3KitRefineSetup's load callback against it.

    <host python> tests/inference_rebind_probe.py <pack root>    -> one JSON object on the last stdout line
    <host python> tests/inference_rebind_probe.py <pack root> --cuda    (on a GPU: the literal chain, below)

A tiny LTXAVModel checkpoint is written to a safetensors file and loaded by the host's `load_diffusion_model` under
torch.inference_mode (as its executor runs UNETLoader). Then the move a GPU makes when the prompt worker handles
"Unload Models" (`unload_all_models()` outside inference mode: `Module.to(offload_device)` assigns each moved copy
to `param.data`) is made with a CPU copy in place of the device copy (`Module._apply`, the function `.to()` runs):
a CPU box has no second device. The model is then loaded partially by the host's ModelPatcher (lowvram_model_memory
half its size) and run under inference mode, once as loaded (host) and once through H3KitRefineSetup (pack).
On a CPU box nothing is copied at load, so the host case stops at the first view of any weight (a Linear's
`weight.t()`); "host_leaf_moved" also makes the copy a GPU load makes of every layer (resident ones moved to the GPU,
offloaded ones cast per call, both inside inference mode), which leaves only the non-leaf tables as they were: the
failure the H200 clip showed (av_model.py, `scale_shift_table[indices]`).

--cuda (a GPU machine, no stand-ins): the model is loaded whole by the host's load_models_gpu under inference mode
(the uncapped run), unloaded by the host's own unload_all_models() outside it (what main.py does for "Unload
Models", and what bench_clip.py did between configurations in run D7), then loaded partially by its ModelPatcher
and run; the same with H3KitRefineSetup's clone.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
import types
from importlib import import_module
from pathlib import Path

sys.path.insert(0, os.getcwd())
from comfy.cli_args import args  # noqa: E402

CUDA = "--cuda" in sys.argv
args.cpu = not CUDA  # model_management reads this at import: never touch a GPU unless asked
import comfy.model_management as mm  # noqa: E402
import comfy.ops  # noqa: E402
import comfy.sd  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

PACK = sys.argv[1]
TINY = {"num_layers": 1, "attention_head_dim": 4, "audio_attention_head_dim": 2, "cross_attention_dim": 128,
        "audio_cross_attention_dim": 64, "caption_channels": 32, "connector_attention_head_dim": 4,
        "connector_num_attention_heads": 8}


def load_pipeline():
    for name in ("h3kit", "h3kit.nodes", "h3kit.adapters", "h3kit.checks", "h3kit.kernels"):
        package = types.ModuleType(name)
        package.__path__ = [str(Path(PACK, *name.split(".")[1:]))]
        sys.modules[name] = package
    return import_module("h3kit.nodes.pipeline"), import_module("h3kit.adapters.inference_tensors")


def write_checkpoint(path: Path) -> None:
    from comfy.ldm.lightricks.av_model import LTXAVModel

    with torch.device("meta"):
        meta = LTXAVModel(**TINY, dtype=torch.float32, operations=comfy.ops.disable_weight_init)
    gen = torch.Generator().manual_seed(0)
    state = {name: (torch.randn(t.shape, generator=gen) * 0.05) if t.is_floating_point() else torch.zeros(t.shape,
             dtype=t.dtype) for name, t in meta.state_dict().items()}
    save_file(state, str(path), metadata={"config": json.dumps({"transformer": TINY})})


def load(path: Path):
    with torch.inference_mode():
        return comfy.sd.load_diffusion_model(str(path))


def inputs():
    gen = torch.Generator().manual_seed(1)
    device = mm.get_torch_device()
    x, t, context = torch.randn(1, 128, 2, 4, 4, generator=gen), torch.tensor([0.5]), torch.randn(1, 16, 64, generator=gen)
    return [x.to(device)], t.to(device), context.to(device)


def forward(patcher) -> dict:
    x, t, context = inputs()
    dtype = patcher.model_dtype()  # the host's apply_model hands the net its inputs in this dtype (bf16 on a GPU)
    x, context = [v.to(dtype) for v in x], context.to(dtype)
    try:
        with torch.inference_mode():
            out = patcher.model.diffusion_model(x, t, context, frame_rate=24)
        return {"output": out}
    except RuntimeError as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return {"error": str(exc), "at": f"{Path(frame.filename).name}:{frame.lineno}", "line": frame.line}


def unload_outside_inference_mode(patcher) -> None:
    patcher.model._apply(lambda tensor: tensor.clone())


def detached(module, helpers) -> list[str]:
    return [name for name, t in module.named_parameters() if helpers.counter_detached(t)]


def partial_load(patcher) -> bool:
    with torch.inference_mode():
        patcher.load(mm.get_torch_device(), lowvram_model_memory=patcher.model_size() // 2)
    # Comfy-Org hosts keep the flag on the model; the installable fork (0.12.1) on its patcher's measurements
    flag = getattr(patcher.model, "model_lowvram", None)
    if flag is None:
        flag = patcher._memory_measurements.model_lowvram
    return bool(flag)


def cuda_chain(path: Path, pipeline, helpers) -> dict:
    """On a GPU: whole load, the host's unload outside inference mode, partial load, forward; host and pack."""
    result: dict = {"device": torch.cuda.get_device_name()}
    fresh = load(path)
    with torch.inference_mode():
        mm.load_models_gpu([fresh])
    reference = forward(fresh)["output"].cpu()
    mm.unload_all_models()
    for case in ("host", "pack"):
        patcher = load(path)
        if case == "pack":
            patcher = pipeline.H3KitRefineSetup().execute(patcher)[0]
        with torch.inference_mode():
            mm.load_models_gpu([patcher])
        whole = forward(patcher)
        mm.unload_all_models()  # outside inference mode, as main.py's prompt worker calls it
        result[f"{case}_whole_ok"] = "output" in whole
        result[f"{case}_detached_after_unload"] = len(detached(patcher.model.diffusion_model, helpers))
        result[f"{case}_partial"] = partial_load(patcher)
        run = forward(patcher)
        result[case] = {k: v for k, v in run.items() if k != "output"}
        if "output" in run:
            result[case]["bitwise_equal_to_fresh"] = bool(torch.equal(run["output"].cpu(), reference))
        mm.unload_all_models()
    return result


def main() -> dict:
    pipeline, helpers = load_pipeline()
    folder = Path(tempfile.mkdtemp(prefix="h3kit-rebind-"))
    path = folder / "ltx_tiny.safetensors"
    write_checkpoint(path)
    if CUDA:
        return cuda_chain(path, pipeline, helpers)
    result: dict = {}

    fresh = load(path)
    params = dict(fresh.model.diffusion_model.named_parameters())
    result["loaded_as_inference"] = all(t.is_inference() for t in params.values())
    reference = forward(fresh)["output"]
    result["non_leaf"] = [n for n in params if "scale_shift_table" in n]

    host = load(path)
    unload_outside_inference_mode(host)
    result["detached_after_unload"] = len(detached(host.model.diffusion_model, helpers))
    result["params"] = len(params)
    result["host_partial"] = partial_load(host)
    result["host_detached_after_load"] = detached(host.model.diffusion_model, helpers)
    host_run = forward(host)
    result["host"] = {k: v for k, v in host_run.items() if k != "output"}

    gpu_like = load(path)
    unload_outside_inference_mode(gpu_like)
    with torch.inference_mode():
        for module in gpu_like.model.diffusion_model.modules():
            if hasattr(module, "comfy_cast_weights"):
                module._apply(lambda tensor: tensor.clone())
    result["host_leaf_moved_partial"] = partial_load(gpu_like)
    result["host_leaf_moved_detached"] = detached(gpu_like.model.diffusion_model, helpers)
    result["host_leaf_moved"] = {k: v for k, v in forward(gpu_like).items() if k != "output"}

    pack = load(path)
    patched = pipeline.H3KitRefineSetup().execute(pack)[0]
    unload_outside_inference_mode(patched)
    result["pack_partial"] = partial_load(patched)
    result["pack_detached_after_load"] = detached(patched.model.diffusion_model, helpers)
    pack_run = forward(patched)
    result["pack"] = {k: v for k, v in pack_run.items() if k != "output"}
    if "output" in pack_run:
        result["pack"]["bitwise_equal_to_fresh"] = bool(torch.equal(pack_run["output"], reference))
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
