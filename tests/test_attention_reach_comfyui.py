"""Tier (b), issue 30 row 9: every attention call the host's own H3 / LTX-2 model makes reaches the pack's attention
override, and the node's report and its per-sampling summary say so, site by site.

tests/attention_reach_probe.py runs in each host's Python (COMFYUI_DIRS; CPU): a tiny model of the host's classes,
loaded by the host's loader and sampled by `comfy.sample.sample` (2 steps, cfg 2, a positive and a negative prompt),
with the host's attention function wrapped by a spy that counts every call by where it comes from (read from the
call stack, not from the pack's tags). The host calls H3's token refiner and LTX's text connectors without
transformer_options, so an override there alone misses them; H3KitAttentionBackend reaches them too.
Skips per capability: no MiniMax-H3 (TokenRefiner), no LTX-2 audio-video model with text connectors.
"""

from __future__ import annotations

import json
from pathlib import Path
from subprocess import run as run_process

import pytest
from comfyui_host import host_checkout, host_id, host_params

pytestmark = pytest.mark.comfyui
PACK_ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("attention_reach_probe.py")
SELF, CROSS = "diffusion blocks, self-attention", "diffusion blocks, cross-attention"
REFINER, VIDEO, AUDIO = "H3 token refiner", "LTX video text connector", "LTX audio text connector"
# The probe's tiny models, 2 steps, cfg 2: H3 runs cond and uncond apart (batch 1), 1 block and 1 refiner block;
# LTXAV batches them, 1 block of 6 attentions (2 self, 4 cross), 2 layers per text connector, one call per prompt.
EXPECTED = {"h3": {SELF: 4, REFINER: 2}, "ltx": {SELF: 4, CROSS: 8, VIDEO: 4, AUDIO: 4}}
SUMMARIES = {
    "h3": "H3KitAttentionBackend: sampling done: 6 attention calls, 0 on torch SDPA cudnn; 6x host: not a CUDA tensor "
          "(cpu); by site: diffusion blocks 4 (self-attention 4, cross-attention 0), H3 token refiner 2",
    "ltx": "H3KitAttentionBackend: sampling done: 20 attention calls, 0 on torch SDPA cudnn; 20x host: not a CUDA "
           "tensor (cpu); by site: diffusion blocks 12 (self-attention 4, cross-attention 8), LTX video text connector "
           "4, LTX audio text connector 4",
}
TEXT_SITES = {"h3": {REFINER: 1}, "ltx": {VIDEO: 2, AUDIO: 2}}  # attention layers per site


@pytest.fixture(scope="module", params=host_params(), ids=host_id)
def probe(request):
    folder, python = host_checkout(request.param)
    done = run_process([python, str(PROBE), str(PACK_ROOT)], cwd=folder, capture_output=True, text=True,
                       timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _family(probe, family):
    capability = {"h3": "has_h3", "ltx": "has_ltxav"}[family]
    if not probe[capability]:
        pytest.skip(f"this host has no {'MiniMax-H3 token refiner' if family == 'h3' else 'LTX-2 text connectors sized by its config'}")
    return probe[family]


@pytest.mark.parametrize("family", ["h3", "ltx"])
def test_the_host_calls_the_text_side_without_transformer_options(probe, family):
    """What the report says of the host: an override in transformer_options alone reaches the diffusion blocks only."""
    result = _family(probe, family)
    assert result["host_calls"] == EXPECTED[family]
    options_only = result["options_only"]
    assert options_only["calls"] == EXPECTED[family]
    missed = {site: n for site, n in EXPECTED[family].items() if site not in (SELF, CROSS)}
    assert options_only["override_sites"] == {site: n for site, n in EXPECTED[family].items() if site not in missed}


@pytest.mark.parametrize("family", ["h3", "ltx"])
def test_every_attention_call_reaches_the_backend_override_and_the_summary_counts_them(probe, family):
    backend = _family(probe, family)["backend"]
    assert backend["calls"] == EXPECTED[family]  # the patch adds or drops no attention call
    assert backend["override_sites"] == EXPECTED[family]
    assert backend["paths"] == {"host: not a CUDA tensor (cpu)": sum(EXPECTED[family].values())}
    assert backend["summaries"] == [SUMMARIES[family]]
    assert backend["equal"]  # CPU: every call runs the host's attention, so the output is the host's bitwise


@pytest.mark.parametrize("family", ["h3", "ltx"])
def test_the_report_names_each_site_and_how_it_is_reached(probe, family):
    coverage = _family(probe, family)["backend"]["report"]["coverage"]
    assert coverage["diffusion blocks"].startswith("every attention call of the diffusion blocks")
    for site, layers in TEXT_SITES[family].items():
        assert coverage[site].startswith(f"reached: its {layers} attention layer(s) are patched to pass this override "
                                         "(the host calls them without transformer_options")
    assert not any(line.startswith("NOT reached") for line in coverage.values())
    assert set(coverage) == {"diffusion blocks", *TEXT_SITES[family], "outside this MODEL"}


@pytest.mark.parametrize("family", ["h3", "ltx"])
def test_with_low_vram_head_groups_every_call_still_reaches_the_override(probe, family):
    run = _family(probe, family)["lowvram_backend"]
    groups = {site: 2 * n if site in (SELF, CROSS) else n for site, n in EXPECTED[family].items()}  # 2 head groups
    assert run["calls"] == groups and run["override_sites"] == groups
    assert set(run["lowvram_report"]["not_patched"]) == set(TEXT_SITES[family])
    for site, layers in TEXT_SITES[family].items():
        assert run["lowvram_report"]["not_patched"][site].startswith(
            f"{layers} attention layer(s) run the host's own forward")
