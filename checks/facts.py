"""The pack's documented facts, each defined once: grids, limits, the sigma grammar, versions, exit codes.

Every other module (nodes, rules, the CLI, the docs) imports these names; a test walks the codebase for
copies of these literals (tests/test_facts.py). Pure Python: no torch, no ComfyUI.
Sources: shared/reference/field-notes.md (§A2 frame grids, §A4 refine sigmas, §A6 versions) and
host-api.md (§1, §4 the H3 text width).
"""

from __future__ import annotations

import math
import sys
from re import compile as regex

# ------------------------------------------------------------------------------------------ frame grids
H3_LENGTH_MIN = 5
H3_LENGTH_STEP = 17  # H3 drafts sit on the 17k+5 frame grid: 5, 22, 39 ... 124 ... 362
H3_LENGTH_MAX = 362  # 15.08 s at 24 fps: the longest clip H3 was trained for (field-notes §C2)
# What the host accepts: the `length` input of MiniMaxH3ImageToVideo / ReferenceToVideo / EmptyMiniMaxH3LatentAV
# goes up to 3600 (ComfyUI 0.33.0 comfy_extras/nodes_minimax_h3.py; tooltip "trained range is ~124-362, longer is
# untested"). Above H3_LENGTH_MAX is a warning, above this the host refuses the prompt.
H3_LENGTH_HOST_MAX = 3600
LTX_FRAME_STEP = 8  # LTX-2.5 takes 8n+1 frames
FRAME_POLICIES = ("trim_to_8n_plus_1", "pad_to_8n_plus_1", "strict")

# ---------------------------------------------------------------------------------------------- sizes
H3_SIDE_MULTIPLE = 32  # core H3 latent nodes take width/height in steps of 32
LTX_SIDE_MULTIPLE = 32  # LTX latents are /32
OUTPUT_SIDE_MULTIPLE = 64  # the two-stage output: LTX VAE-encodes half of it, which must be a multiple of 32

# --------------------------------------------------------------------------------------------- sigmas
# F23, measured refining an H3 draft (672x384) with LTX-2.5 (field-notes §A4, R8): identity held at 0.78, details
# change at 0.85, another face at 0.909. It is about an H3 draft; LTX refining its own stage 1 is not covered by it.
REPAINT_SIGMA_LIMIT = 0.8
# The refine schedules H3KitRefineSetup offers, each named by what it is, with its source.
SIGMA_SCHEDULES: dict[str, tuple[float, ...]] = {
    # The field report's author's stage 2 for an H3 draft, calibrated at a 672x384 draft for LTX-2.5 (field-notes §A4)
    "identity_0.78": (0.78, 0.643, 0.546, 0.0),
    # identity_0.78 scaled to the first sigma 0.5 of T8's "identity" preset (field-notes §A4): gentler still
    "identity_0.5": (0.5, 0.412, 0.350, 0.0),
    # LTX-2.5 stage 2 after LTXVLatentUpsampler, as ComfyUI's official templates write it: ManualSigmas
    # "0.85, 0.7250, 0.4219, 0.0" in video_ltx2_5_t2v/i2v.json (comfyui-workflow-templates-json 0.1.47 and 0.1.123;
    # the same templates' LTX-2.3 two-stage graphs video_ltx2_3_t2v/i2v/ia2v/id_lora.json use it too). utensils/mold
    # #1396 (2026-08-26) corrected its LTX-2.5 distilled stage 2 to this table.
    "ltx2_5_stage2": (0.85, 0.725, 0.4219, 0.0),
    # LTX-2.0's distilled stage 2: the official LTX-2 templates (video_ltx2_t2v/i2v/i2v_distilled/canny/depth .json,
    # ManualSigmas "0.909375, 0.725, 0.421875, 0.0"), the table NVIDIA's Sol configs/default.json uses (field-notes §A4)
    "ltx2_0_distilled_stage2": (0.909375, 0.725, 0.421875, 0.0),
}
# What each schedule is for, in one line (H3KitRefineSetup's tooltip, the validate rule, docs).
SCHEDULE_NOTES = {
    "identity_0.78": "refines an H3 draft and keeps its identity (field report, measured; the default)",
    "identity_0.5": "gentler: identity_0.78 scaled to T8's identity preset",
    "ltx2_5_stage2": "LTX-2.5's official stage 2 refining LTX's own stage 1 (ComfyUI templates); on an H3 draft it "
                     "changes details (F23), so it needs allow_repaint",
    "ltx2_0_distilled_stage2": "LTX-2.0's distilled stage 2, not LTX-2.5's (official LTX-2 templates, NVIDIA's Sol "
                               "config); on an H3 draft it paints another face (F23), so it needs allow_repaint",
}
# Names saved graphs may still hold -> the schedule they always meant. ComfyUI refuses a combo value that is not in
# the list, so these stay selectable; the node and the validate rule say once what they really are.
LEGACY_SCHEDULES = {"nvidia_official": "ltx2_0_distilled_stage2"}  # the pack's name before issue 30
DEFAULT_SCHEDULE = "identity_0.78"
MANUAL_SCHEDULE = "manual"
SCHEDULE_CHOICES = (*SIGMA_SCHEDULES, MANUAL_SCHEDULE, *LEGACY_SCHEDULES)  # H3KitRefineSetup's `schedule` combo
SIGMA_EXAMPLE = "0.78, 0.643, 0.546, 0"
# The rest of the official LTX-2.5 stage 2 (video_ltx2_5_t2v/i2v.json): KSamplerSelect euler_ancestral,
# LTXVDualCFGGuider (cfg 1, 1) and an audio+video latent (LTXVConcatAVLatent of the upsampled video and the stage-1
# audio). H3KitRefineSetup's default differs on purpose: first sigma 0.78, euler, a video-only latent (the sound is
# H3's and is muxed at the end; field-notes §A3).
LTX2_5_STAGE2_SAMPLER = "euler_ancestral"
LTX2_5_STAGE2_GUIDER = "LTXVDualCFGGuider"


def schedule_sigmas(name: object) -> tuple[float, ...] | None:
    """A named schedule's sigmas (a legacy name gives its table's), None for 'manual' or an unknown name."""
    key = LEGACY_SCHEDULES.get(name, name) if isinstance(name, str) else None
    return SIGMA_SCHEDULES.get(key) if key is not None else None


def sigma_text(values) -> str:
    """(0.909375, 0.725, 0.421875, 0.0) -> '0.909375, 0.725, 0.421875, 0' (how docs and messages show a schedule)."""
    return ", ".join(f"{value:g}" for value in values)


# ------------------------------------------------------------------------------------ Ref2VA references
# The Autogrow slots of MiniMaxH3ReferenceToVideo (ComfyUI 0.33.0 comfy_extras/nodes_minimax_h3.py, `max` of each
# TemplatePrefix). Each soundtrack ref_video_audio_N belongs to ref_video_N (the host looks it up by that number).
H3_REF_SLOTS = {"ref_images": 9, "ref_videos": 3, "ref_video_audios": 3, "ref_audios": 3}
# What the Ref2VA checkpoint is documented for (field-notes §C1): at most 3 audio clips (soundtracks and standalone
# audio together) and 12 reference files in all. The host accepts more; beyond these is untested (a warning).
H3_REF_AUDIO_CLIPS_MAX = 3
H3_REF_FILES_MAX = 12

# ------------------------------------------------------------------------------------- text embeddings
H3_EMBEDDING_WIDTH = 5120  # Qwen3-VL-32B hidden width = MiniMax-H3 text_dim (host-api.md §1, §4)
# MiniMax-H3's seven special tokens that its tokenizer_config.json declares but the Qwen vocabulary lacks: HF numbers
# them in this order after the last added token (151668), so the order is the ids. Upstream ComfyUI adds them in
# Comfy-Org/ComfyUI#15808 (2026-08-22; host-api.md §4); ComfyUI 0.33.0 and yzkee @783545f6 split them into BPE pieces.
# Checked in tier (b): the host's own Qwen tokenizer given these as special tokens assigns exactly these ids.
H3_DIALOGUE_TOKENS = {"<d>": 151669, "</d>": 151670, "<|cutoff|>": 151671, "<|lyrics_start|>": 151672,
                      "<|lyrics_end|>": 151673, "<|caption_start|>": 151674, "<|caption_end|>": 151675}

# ------------------------------------------------------------------------------------------- versions
MIN_COMFYUI = (0, 34, 0)  # the ComfyUI of the field report's correct stack; it imports only with MIN_KITCHEN (X07)
MIN_KITCHEN = (0, 2, 31)  # comfy-kitchen that ComfyUI 0.34 imports (X07)
# F01, the field report's two data points for the two-stage H3 -> LTX refine (field-notes §A6; torch 2.13.0+cu130 in
# both): (ComfyUI, comfy-kitchen). Nothing is known about the stacks between them; the run-time correlation guard
# (H3KitLatentGuard with 'reference') is what catches a garbage refine on any host.
F01_CORRECT_STACK = ((0, 34, 0), (0, 2, 31))
F01_GARBAGE_STACK = ((0, 30, 0), (0, 2, 26))
MIN_TORCH_CUDA_MAJOR = 13  # kitchen's CUDA backend (FP4 GEMM) needs a CUDA 13 torch build (F12)


def parse_version(text: str) -> tuple[int, ...]:
    """'0.34.0' -> (0, 34, 0); non-numeric tails are ignored ('0.3.64rc1' -> (0, 3, 64))."""
    parts: list[int] = []
    for piece in text.strip().lstrip("v").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece else ""
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts)


def version_text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def pack_version() -> str:
    """The pack's own version (its root __init__'s __version__), under whatever name ComfyUI imported it. Reading
    it imports nothing: the command line asks for it without loading the nodes."""
    package = sys.modules.get(__package__.rpartition(".")[0])
    return getattr(package, "__version__", "unknown")


# ------------------------------------------------------------------------------------ workflow graphs
PRIMITIVE_MAX_HOPS = 16  # Primitive -> Primitive chains followed when resolving a widget value (bounded)
MAX_WORKFLOW_BYTES = 64 * 2**20  # a workflow file or pasted text; real ones are < 1 MiB (docs/security.md)
MAX_WORKFLOW_DEPTH = 64  # JSON nesting; API graphs nest 4-5 levels, UI graphs about 8
# The two-stage draft (nodes/draft.py): what H3KitLoadDraft reads, what `run --stage2-server` downloads and uploads.
# A 1344x768, 121-frame clip's draft is 3.4 MB (LTX latent 2.1 MB + 32 kHz stereo audio 1.3 MB); 361 frames: 9.8 MB.
MAX_DRAFT_BYTES = 2**30

# ----------------------------------------------------------------------------------------- exit codes
# One table for every command (README, section 'Exit codes and output'; tests/test_cli_contract.py runs each
# command against it). When several jobs run, the worst (highest) code wins.
EXIT_OK = 0
EXIT_FAILED = 1  # the work ran and failed, or a check found a problem
EXIT_INVALID = 2  # refused before any work: arguments, input files, validation, an output name
EXIT_TIMEOUT = 3  # --timeout ran out (the job may still be running)
EXIT_UNREACHABLE = 4  # the server cannot be reached
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, the shells' convention)
EXIT_CODES = {
    EXIT_OK: "ok: done, and every check passed",
    EXIT_FAILED: "failed: the work ran and failed, or a check found a problem (an execution error, a lost job, an "
                 "output that fails verification, a doctor FAIL, a failed demo check, values beyond fp16 in "
                 "convert, an unusable file in cond list, a stale workflow copy)",
    EXIT_INVALID: "refused before any work: bad arguments; an input file that is missing, unreadable or of the "
                  "wrong type; a workflow that does not validate; an output that exists or has the wrong extension",
    EXIT_TIMEOUT: "timeout: --timeout ran out (run: the job may still be running, the message says so)",
    EXIT_UNREACHABLE: "server unreachable (nothing was submitted, or the connection was lost: the message says which)",
    EXIT_INTERRUPTED: "interrupted: Ctrl-C (one line; nothing half-written is left)",
}


def worst_exit(codes) -> int:
    """The exit code of several jobs: the worst one wins (a crashed job is never hidden by a good one)."""
    return max(codes, default=EXIT_OK)


# ----------------------------------------------------------------------------------- grid arithmetic
def is_h3_length(frames: int) -> bool:
    return frames >= H3_LENGTH_MIN and (frames - H3_LENGTH_MIN) % H3_LENGTH_STEP == 0


def nearest_h3_lengths(frames: int) -> tuple[int, int]:
    """The H3 grid lengths just below and just above `frames` (equal when it is on the grid)."""
    k = max(0, (frames - H3_LENGTH_MIN) // H3_LENGTH_STEP)
    below = H3_LENGTH_MIN + k * H3_LENGTH_STEP
    return below, below if below == frames else below + H3_LENGTH_STEP


def h3_grid_lengths(upto: int = H3_LENGTH_MAX) -> range:
    return range(H3_LENGTH_MIN, upto + 1, H3_LENGTH_STEP)


def is_ltx_length(frames: int) -> bool:
    return frames >= 1 and (frames - 1) % LTX_FRAME_STEP == 0


def ltx_trim_length(frames: int) -> int:
    """The longest 8n+1 count that is <= frames (frames >= 1)."""
    return LTX_FRAME_STEP * ((frames - 1) // LTX_FRAME_STEP) + 1


def ltx_pad_length(frames: int) -> int:
    """The shortest 8n+1 count that is >= frames (frames >= 1)."""
    return LTX_FRAME_STEP * math.ceil((frames - 1) / LTX_FRAME_STEP) + 1


def kept_frame_count(frames: int, policy: str) -> int | None:
    """Frames LTX receives under `policy`; None when `strict` and `frames` is off the 8n+1 grid."""
    if policy == "trim_to_8n_plus_1":
        return ltx_trim_length(frames)
    if policy == "pad_to_8n_plus_1":
        return ltx_pad_length(frames)
    if policy == "strict":
        return frames if is_ltx_length(frames) else None
    raise ValueError(f"unknown frame policy {policy!r}; use one of {', '.join(FRAME_POLICIES)}")


def nearest_multiples(value: int, multiple: int) -> tuple[int, int]:
    """The multiples of `multiple` just below and above `value` (below is at least `multiple`)."""
    below = max(multiple, (value // multiple) * multiple)
    above = below if below == value else max(multiple, -(-value // multiple) * multiple)
    return below, above


def describe_nearest(value: int, multiple: int) -> str:
    below, above = nearest_multiples(value, multiple)
    return f"{below}" if below == above else f"{below} or {above}"


# ------------------------------------------------------------------------------------- sigma grammar
class SigmaError(ValueError):
    """A sigma list that cannot be used; the message says why."""


_SIGMA_SEPARATORS = regex(r"[,;\s]+|->|→")
MAX_SIGMA_TEXT = 4096  # characters; a schedule is a handful of numbers


def parse_sigmas(text: str) -> list[float]:
    """The one sigma-list grammar: '0.78, 0.643, 0.546, 0' -> floats.

    Separators: commas, semicolons, whitespace, '->'; optional surrounding [ ]. The values must be finite,
    in [0, 1], strictly descending, end at 0, at least two of them.
    """
    if not isinstance(text, str):
        raise SigmaError(f"expected text, got {type(text).__name__}")
    if len(text) > MAX_SIGMA_TEXT:
        raise SigmaError(f"{len(text)} characters; a schedule is a few numbers (at most {MAX_SIGMA_TEXT} characters)")
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    tokens = [tok for tok in _SIGMA_SEPARATORS.split(body.strip()) if tok]
    if len(tokens) < 2:
        raise SigmaError(f"needs at least two values ending at 0, got {len(tokens)}")
    values = []
    for tok in tokens:
        try:
            value = float(tok)
        except ValueError:
            raise SigmaError(f"'{tok[:40]}' is not a number") from None
        if not math.isfinite(value):
            raise SigmaError(f"'{tok}' is not finite")
        if not 0.0 <= value <= 1.0:
            raise SigmaError(f"{value} is outside [0, 1]")
        values.append(value)
    for prev, nxt in zip(values, values[1:], strict=False):
        if nxt >= prev:
            raise SigmaError(f"not strictly descending ({prev} then {nxt})")
    if values[-1] != 0.0:
        raise SigmaError(f"must end at 0 so the last step fully denoises (ends at {values[-1]})")
    return values
