"""The planted bugs (issue 16): each is one exact text replacement in one file, and the tests that must catch it.

M01-M09 are the nine bugs that once passed the whole suite; the others guard the same promises from other sides.
The old text must occur exactly once in its file (run_planted.py --check); when code moves, move the mutant.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class Mutant:
    id: str
    summary: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    needs: str = ""  # "sage": its tests need sageattention 1.0.6 + Triton 3.2.0 (run_planted.py --sage-python)


F01 = ("tests/test_latent_guard_f01.py", "tests/test_pipeline.py")
SAGE = ("tests/test_turing_sage.py",)
SPLICE = ("tests/test_effects.py",)
LOWVRAM = tuple(sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("tests/test_lowvram*.py")))
RUN = ("tests/test_run.py", "tests/test_exit_codes.py", "tests/test_cli.py")
FORGED = ("tests/test_forged_output.py",)
MEMORY = ("tests/test_memory_bounds.py",)
HOST = ("tests/test_host_layout.py", "tests/test_run.py", "tests/test_server_routes.py")
EFFECTS = ("tests/test_effects.py", "tests/test_h3_prompt.py", "tests/test_dialogue_tokens.py")
TYPES = ("tests/test_host_types.py",)
RULES = ("tests/test_facts.py", "tests/test_validate.py", "tests/test_pipeline_workflows.py", "tests/test_doctor.py",
         "tests/test_pipeline.py", "tests/test_f23_refine_scope.py")
F23_SCOPE = ("tests/test_f23_refine_scope.py",)

MUTANTS: list[Mutant] = [
    # ------------------------------------------------------------------ the nine that used to pass
    Mutant("M01", "F23 offline lint limit moved to 0.9", "checks/rules_lints.py",
           "sigmas[0] <= facts.REPAINT_SIGMA_LIMIT):", "sigmas[0] <= 0.9):", RULES),
    Mutant("M02", "F01 correlation uncentred (cosine)", "kernels/frames.py",
           "    x = x - x.mean()\n    y = y - y.mean()\n", "", F01),
    Mutant("M03", "F01 correlation abs()-ed", "kernels/frames.py",
           "return float((x * y).sum()) / denom", "return abs(float((x * y).sum())) / denom", F01),
    Mutant("M04", "LTX attention patch never splits heads", "kernels/chunked.py",
           "    ranges = split_ranges(heads, groups)\n    state: dict[str, Any] = {\"out\": None, \"reason\": \"\"}\n\n"
           "    masked = {} if mask is None else",
           "    ranges = split_ranges(heads, 1)\n    state: dict[str, Any] = {\"out\": None, \"reason\": \"\"}\n\n"
           "    masked = {} if mask is None else", LOWVRAM),
    Mutant("M05", "H3 patch always builds the fused qkv, report still says per-group", "kernels/chunked.py",
           "        out = None\n        for (h0, h1), parts in zip(ranges, slices, strict=True):",
           "        state[\"fused\"] = F.linear(inp, weight, bias)\n        out = None\n"
           "        for (h0, h1), parts in zip(ranges, slices, strict=True):", LOWVRAM),
    Mutant("M06", "FFN chunked along the batch axis (B=1 never chunked)", "nodes/lowvram.py",
           "dim = 0 if x.dim() == 2 else x.dim() - 2  #", "dim = 0  #", LOWVRAM),
    Mutant("M07", "exit codes remapped (timeout 4, unreachable 3)", "checks/facts.py",
           "EXIT_TIMEOUT = 3  # --timeout ran out (the job may still be running)\nEXIT_UNREACHABLE = 4",
           "EXIT_TIMEOUT = 4  # --timeout ran out (the job may still be running)\nEXIT_UNREACHABLE = 3", RUN),
    Mutant("M08", "fan-out returns the best job's code, not the worst", "checks/facts.py",
           "return max(codes, default=EXIT_OK)", "return min(codes, default=EXIT_OK)", RUN),
    Mutant("M09", "SageAttention launcher checks BLOCK_M but not BLOCK_N", "kernels/sage_turing.py",
           "config.block_m != QUANT_BLOCK_Q or config.block_n != QUANT_BLOCK_K",
           "config.block_m != QUANT_BLOCK_Q", SAGE, needs="sage"),
    # ------------------------------------------------------------------ F01 / F10 guard
    Mutant("M10", "F01 default min_correlation 0.5 -> 0.3 (node widget)", "nodes/pipeline.py",
           '"min_correlation": ("FLOAT", {"default": 0.5,', '"min_correlation": ("FLOAT", {"default": 0.3,', F01),
    Mutant("M11", "F01 default min_correlation 0.5 -> 0.3 (execute)", "nodes/pipeline.py",
           'def execute(self, latent, mode="error", min_correlation=0.5, reference=None):',
           'def execute(self, latent, mode="error", min_correlation=0.3, reference=None):', F01),
    Mutant("M12", "F01 gate reads the audio stream instead of the video", "nodes/pipeline.py",
           "if index == 0 and corr is not None and corr < threshold:",
           "if index == 1 and corr is not None and corr < threshold:", F01),
    Mutant("M13", "F10 guard ignores Inf", "nodes/pipeline.py",
           "if stats.nan_count or stats.inf_count:", "if stats.nan_count:", F01),
    Mutant("M14", "F23 limit (the one constant) moved to 0.9", "checks/facts.py",
           "REPAINT_SIGMA_LIMIT = 0.8", "REPAINT_SIGMA_LIMIT = 0.9", RULES),
    Mutant("M15", "sigma parser accepts an unordered list", "checks/facts.py",
           "        if nxt >= prev:\n", "        if False:\n", RULES),
    # ------------------------------------------------------------------ EffectSplice
    Mutant("M16", "splice one token late", "nodes/effects.py",
           "spliced = base.entries[:index] + [(row, 1.0) for row in rows] + base.entries[index:]",
           "spliced = base.entries[:index + 1] + [(row, 1.0) for row in rows] + base.entries[index + 1:]", SPLICE),
    Mutant("M17", "splice proof re-counts the list it built", "nodes/effects.py",
           "expected = len(base.entries) + info.rows", "expected = len(spliced)", SPLICE),
    Mutant("M18", "splice ignores strength", "nodes/effects.py",
           'rows = load_effect_rows(node, "effect", info) * strength', 'rows = load_effect_rows(node, "effect", info)',
           SPLICE),
    Mutant("M19", "splice cross-check compares shapes only", "nodes/effects.py",
           "host_rows.shape != rows.shape or not torch.equal(host_rows, rows)", "False", SPLICE),
    # ------------------------------------------------------------------ SageAttention launcher
    Mutant("M20", "quantizer gets BLOCK_M as its k block", "kernels/sage_turing.py",
           "BLKK=config.block_n", "BLKK=config.block_m", SAGE, needs="sage"),
    Mutant("M21", "Turing-safe config also chosen on sm_80", "kernels/sage_turing.py",
           "if capability < (8, 0):", "if capability <= (8, 0):", SAGE, needs="sage"),
    Mutant("M22", "Turing-safe config keeps the package's fp32 output tile", "kernels/sage_turing.py",
           'return LaunchConfig("turing-safe", 4 if head_dim == 64 else 8, 1, fp16_output=True)',
           'return LaunchConfig("turing-safe", 4 if head_dim == 64 else 8, 1, fp16_output=False)', SAGE, needs="sage"),
    # ------------------------------------------------------------------ run
    Mutant("M23", "a lost job exits 0", "scripts/run.py",
           '    if outcome.state in ("lost", "refused"):\n        warn(label, f"FAIL  prompt {prompt_id}: {outcome.note}")\n'
           "        return EXIT_FAILED",
           '    if outcome.state in ("lost", "refused"):\n        warn(label, f"FAIL  prompt {prompt_id}: {outcome.note}")\n'
           "        return EXIT_OK", RUN),
    Mutant("M24", "failed output verification exits 0", "scripts/run.py",
           "return EXIT_FAILED if any(c.status == FAIL for c in checks) else EXIT_OK",
           "return EXIT_OK", RUN),
    # ------------------------------------------------------------------ low-VRAM arithmetic
    Mutant("M25", "FFN chunk threshold off by one (== threshold skipped)", "nodes/lowvram.py",
           "if tokens < self.seq_threshold:", "if tokens <= self.seq_threshold:", LOWVRAM),
    Mutant("M26", "H3 attention patch never splits heads", "kernels/chunked.py",
           "    ranges = split_ranges(heads, groups)\n    state: dict[str, Any] = {\"out\": None, \"reason\": \"\"}\n\n"
           "    def attend(q, k, v, g):",
           "    ranges = split_ranges(heads, 1)\n    state: dict[str, Any] = {\"out\": None, \"reason\": \"\"}\n\n"
           "    def attend(q, k, v, g):", LOWVRAM),
    Mutant("M27", "run's fan-out takes the best code at its own call site", "scripts/run.py",
           "return worst_exit([*codes.values(), *([EXIT_FAILED] * len(missing))])",
           "return min([*codes.values(), *([EXIT_FAILED] * len(missing))], default=EXIT_OK)", RUN),
    # ------------------------------------------------------------------ issue 23: host layouts and F01 from evidence
    Mutant("M28", "host layout: a key never moves to its other parent", "checks/host_layout.py",
           "        if len(targets) == 1:", "        if len(targets) == 2:", HOST),
    Mutant("M29", "DynamicCombo option objects compared with the value, not by key", "checks/graph.py",
           'return "COMBO", {**opts, "options": option_keys(opts.get("options"))}', 'return "COMBO", opts', HOST),
    Mutant("M30", "F01: an unguarded refine on an untested stack passes", "checks/server.py",
           '    return Check(WARN, "comfyui version", f"{text}; nothing in this workflow checks the output of refine node(s) "',
           '    return Check(PASS, "comfyui version", f"{text}; nothing in this workflow checks the output of refine node(s) "',
           ("tests/test_doctor.py",)),
    Mutant("M31", "F01: a native-H3 host older than the correct stack FAILs for its version", "checks/server.py",
           '    if position == "correct":\n        return Check(PASS, "comfyui version", f"{text}; refine node(s)',
           '    if position != "correct":\n        return Check(FAIL, "comfyui version", f"{text}")\n'
           '    if position == "correct":\n        return Check(PASS, "comfyui version", f"{text}; refine node(s)',
           ("tests/test_doctor.py",)),
    # ------------------------------------------------------------------ issue 30: F23 scoped to an H3 draft
    Mutant("M32", "F23: an i2v guide frame counts as the refined picture", "checks/refine_source.py",
           '"LTXVImgToVideoInplace": ("latent",),', '"LTXVImgToVideoInplace": ("latent", "image"),', F23_SCOPE),
    Mutant("M33", "F23: H3 generating its own latent counts as refining an H3 draft", "checks/refine_source.py",
           "if ct in DRAFT_HANDOFFS or (encoded and is_h3_node(ct)):", "if is_h3_node(ct):", F23_SCOPE),
    Mutant("M34", "F23: a source H3Kit cannot see is FAILed instead of warned about", "checks/rules_lints.py",
           "                severity=WARNING))", "                ))", F23_SCOPE),
    Mutant("M35", "legacy 'nvidia_official' maps to the LTX-2.5 table", "checks/facts.py",
           'LEGACY_SCHEDULES = {"nvidia_official": "ltx2_0_distilled_stage2"}',
           'LEGACY_SCHEDULES = {"nvidia_official": "ltx2_5_stage2"}', ("tests/test_f23_refine_scope.py",
                                                                     "tests/test_pipeline.py")),
    # ------------------------------------------------------------------ issue 30: override reach, picture patterns
    Mutant("M36", "the text-side attention patch tags the site but never passes the override", "nodes/attention_sites.py",
           "        options.setdefault(OVERRIDE_KEY, self.override)  # a call that has the sampler's options keeps its "
           "override\n", "", ("tests/test_attention_sites.py",)),
    Mutant("M37", "mosaic check satisfied by grid steps in one direction (stripes)", "kernels/frames.py",
           "        ratio = min(across, down)", "        ratio = max(across, down)", ("tests/test_frame_patterns.py",)),
    Mutant("M38", "tile check satisfied by a repeat in one direction (a split screen)", "kernels/frames.py",
           "        error = max(min(", "        error = min(min(", ("tests/test_frame_patterns.py",)),
    # ------------------------------------------------------------------ issue 30: effects and dialogue on every host
    Mutant("M39", "effect placed after the first [Shot k] anywhere (a reference sentence, retention_analysis)",
           "checks/h3_prompt.py", "            return header.end(), end, DESCRIPTION_SECTION",
           "            return 0, len(text), None", EFFECTS),
    Mutant("M40", "a [Shot k] inside a sentence counts as a heading", "checks/h3_prompt.py",
           "    found = {match.end() for match in CLAUSE_START.finditer(text, start, end)}",
           "    found = set(range(start, end))", EFFECTS),
    Mutant("M41", "offline, an encoder bypassing the effect prompt's clip is an error (wrong on hosts with #15697)",
           "checks/rules_lints.py",
           '                       severity="error" if host_parses_markers is False else "warning")\n    why =',
           '                       severity="error")\n    why =', EFFECTS),
    Mutant("M42", "dialogue token ids one off upstream's", "nodes/effect_tokens.py",
           "            ids.append(DIALOGUE[match.group(0)])", "            ids.append(DIALOGUE[match.group(0)] + 1)",
           EFFECTS),
    Mutant("M43", "the dialogue fix never applied (the host's split tokens handed on)", "nodes/effect_tokens.py",
           "    prepared = with_dialogue_tokens(node, clip_tokenizer)\n", "    prepared = clip_tokenizer\n", EFFECTS),
    # ------------------------------------------------------------------ issue 30: the host's type system
    Mutant("M44", "MatchType links judged by their type string", "checks/node_inputs.py",
           "if ANY_TYPE in (received, expected) or MATCH_TYPE in (received, expected):",
           "if ANY_TYPE in (received, expected):", TYPES),
    Mutant("M45", "a named Autogrow template read as numbered slots", "checks/node_inputs.py",
           '    if isinstance(group.get("names"), list):\n        return tuple(str(n) for n in group["names"][:MAX_SLOTS]), None',
           '    if False:\n        return tuple(str(n) for n in group["names"][:MAX_SLOTS]), None', TYPES),
    Mutant("M46", "errors of nodes no output depends on kept as errors", "checks/validator.py",
           "if p.severity == ERROR and p.node_id not in runs", "if p.severity == ERROR and p.node_id in ()", TYPES),
    Mutant("M47", "the host's 100-slot cap dropped for named templates", "checks/node_inputs.py",
           'group["names"][:MAX_SLOTS]', 'group["names"]', TYPES),
    # ------------------------------------------------------------------ issue 33: output that cannot be forged
    Mutant("M48", "a line break from outside kept by the one escape", "checks/problem.py",
           '"\\n": "\\\\n", ', '"\\n": "\\n", ', FORGED),
    Mutant("M49", "the name rule refusing only C0 controls again (C1, U+2028, bidi overrides pass)", "adapters/files.py",
           "or unsafe_char(ch)}", "or ord(ch) < 32}", FORGED),
    Mutant("M50", "a validated file's name printed as it is", "scripts/validate.py",
           'summary = f"{word} {printable(path)}: ', 'summary = f"{word} {path}: ', FORGED),
    # ------------------------------------------------------------------ issue 33: memory and time bounded by what is built
    Mutant("M51", "JSON parsed without its value budget (only the byte cap)", "adapters/bounded_json.py",
           "    check_budget(data, what, max_values)\n", "", MEMORY),
    Mutant("M52", "CPU work on server data outside the deadline", "checks/deadline.py",
           "    for deadline in reversed(_APPLIED.get()):", "    for deadline in ():", MEMORY),
    Mutant("M53", "a view that repeats its data stored whole", "nodes/cond_cache_format.py",
           "if materialised > real + MAX_EXPANSION_BYTES and worst is not None:", "if False:", MEMORY),
    Mutant("M54", "a job's execution events kept without a cap", "adapters/comfy_jobs.py",
           "if len(self.events) < MAX_KEPT_EVENTS and self.kept_bytes + size <= MAX_KEPT_EVENT_BYTES:", "if True:",
           MEMORY),
    Mutant("M55", "--timeout nan accepted (it never runs out)", "scripts/options.py",
           "if isinstance(value, float) and not math.isfinite(value):", "if False:", RUN),
    # issue 33 item 1: nothing of the pack holds ComfyUI's event loop
    Mutant("M56", "the on-prompt adaptation compares each undeclared key with every declared one",
           "checks/host_layout.py", "targets = [d for d in declared_by_leaf.get(_leaf(key), ()) if",
           "targets = [d for d in declared if", ("tests/test_event_loop.py",)),
    Mutant("M57", "the preflight worker's parse never looks at its stop flag", "adapters/preflight_request.py",
           "                                 f\"check a smaller graph, or use `{command('validate FILE')}`\")\n        stop()",
           "                                 f\"check a smaller graph, or use `{command('validate FILE')}`\")",
           ("tests/test_event_loop.py",)),
    # issue 32: two stages on two servers
    Mutant("M58", "a vanished server's clip is not tried again on another server of its stage",
           "adapters/comfy_pipeline.py",
           'elif result.kind == "retry" and clip.attempts[stage] < MAX_STAGE_ATTEMPTS and self.live(stage):',
           "elif False:", ("tests/test_pipeline_runner.py",)),
    Mutant("M59", "a hidden name ('.x') accepted as a draft name or a draft's prefix", "nodes/draft.py",
           "if part.startswith(\".\") else (\n            name_problem(part))",
           "if False else (\n            name_problem(part))", ("tests/test_draft.py",)),
    # ------------------------------------------------------------------ issue 33: no loss, one effect check, sniffing
    Mutant("M60", "the cache save publishes with overwrite=True after its own exists() check", "nodes/cond_cache_format.py",
           "        write_stored(target, encoder_state.tensors, metadata, overwrite=overwrite)",
           "        write_stored(target, encoder_state.tensors, metadata, overwrite=True)", ("tests/test_no_loss.py",)),
    Mutant("M61", "without hard links, the publish checks exists() and renames", "adapters/files.py",
           "        _reserve_then_rename(tmp, target)\n",
           "        if target.exists():\n            raise TargetExists(target)\n        os.replace(tmp, target)\n",
           ("tests/test_no_loss.py",)),
    Mutant("M62", "typed markers' rows are not checked for NaN / infinity", "nodes/effect_files.py",
           "    if not bool(finite.all()):", "    if False:", ("tests/test_effect_markers.py",)),
    Mutant("M63", "one effect row over the cap accepted", "nodes/effect_files.py",
           "    if rows > MAX_EFFECT_ROWS:", "    if rows > MAX_EFFECT_ROWS + 1:", ("tests/test_effect_markers.py",)),
    Mutant("M64", "media signatures sniffed before the safetensors header", "checks/filetypes.py",
           '    if _is_safetensors(head):\n        return KINDS["safetensors"]\n', "",
           ("tests/test_filetypes.py",)),
    # ------------------------------------------------------------------ issue 33: no collector pass in the pack's work
    Mutant("M65", "the preflight worker pauses the cyclic collector for the parse only", "adapters/server_routes.py",
           "    with cyclic_gc_paused():\n        try:\n            return _checked_body(",
           "    if True:\n        try:\n            return _checked_body(", ("tests/test_event_loop.py",)),
    Mutant("M66", "a stopped preflight work's Abandoned keeps the frames that hold its graph", "adapters/server_routes.py",
           "            failure = abandoned.with_traceback(None)", "            failure = abandoned",
           ("tests/test_event_loop.py",)),
    Mutant("M67", "the on-prompt handler lets the collector run", "adapters/server_routes.py",
           "    with cyclic_gc_paused():\n        return _adapted_prompt(json_data)", "    return _adapted_prompt(json_data)",
           ("tests/test_event_loop.py",)),
]
