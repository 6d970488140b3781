"""H3Kit's command line: one subcommand per module in this folder (see COMMANDS).

Every command follows one exit-code table (checks/facts.py EXIT_*; each module's EXIT_STATUSES says which codes
it uses and when) and one stream rule (scripts/console.py: results on stdout, errors and warnings on stderr).
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib import import_module

from ..adapters.crash_log import unexpected_error
from ..adapters.log import one_line_records
from ..checks.facts import EXIT_FAILED, EXIT_INTERRUPTED, pack_version
from ..checks.invocation import cli_command
from ..checks.problem import printable

# command -> (module in scripts/, one-line help). Each module has add_arguments(parser), run(args) -> int and
# EXIT_STATUSES {code: what it means for this command}.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "the two-stage handoff on a synthetic draft: DraftToLTX, guards, mp4 mux, decoded and checked"),
    "nodes": ("nodes_list", "list every H3Kit node: id, category, description"),
    "validate": ("validate", "validate API-format workflow JSON offline or against a live server"),
    "doctor": ("doctor", "check machine, server and workflow for version, node, weight and kernel traps"),
    "run": ("run", "run a workflow on ComfyUI over HTTP: validate, follow, download, verify, time"),
    "cond": ("cond", "cached conditioning: build (via ComfyUI), info, list, import a legacy .pt safely"),
    "convert": ("convert", "convert model files: bf16-to-fp16 IN OUT (metadata kept, atomic, verified)"),
    "workflows": ("workflows_ui", "workflows ui: generate the template browser's UI-format copies + thumbnails; "
                  "workflows split: the two-stage graphs cut at the handoff"),
}
EXIT_TABLE_HINT = "README, section 'Exit codes and output'"


# What main() itself may return for any command (its top-level handler), under each command's own statuses.
COMMON_STATUSES = {EXIT_FAILED: "an unexpected error: one line here, the traceback in a crash log",
                   EXIT_INTERRUPTED: "interrupted (Ctrl-C)"}


def statuses_of(module) -> dict[int, str]:
    """Every exit code a command can end with: its own EXIT_STATUSES and main()'s."""
    own = module.EXIT_STATUSES
    return {**COMMON_STATUSES, **own, **({EXIT_FAILED: f"{own[EXIT_FAILED]}; or {COMMON_STATUSES[EXIT_FAILED]}"}
                                         if EXIT_FAILED in own else {})}


def exit_epilog(statuses: dict[int, str]) -> str:
    """'exit status: 0 ...; 2 ...' for a command's --help, from statuses_of(module)."""
    return "exit status: " + "; ".join(f"{code} {text}" for code, text in sorted(statuses.items())) + \
        f". Errors and warnings go to stderr, results to stdout ({EXIT_TABLE_HINT})."


class Parser(argparse.ArgumentParser):
    """argparse, whose error lines echo what was typed: made printable first (a pasted argument may carry
    terminal escapes). Subcommand parsers are of this class too (argparse passes its own class down)."""

    def error(self, message: str):
        super().error(printable(message))


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = Parser(
        prog=prog or cli_command(),
        description="H3Kit: MiniMax-H3 -> LTX-2.5 two-stage pipeline tools for ComfyUI.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, summary) in COMMANDS.items():
        module = import_module(f".{module_name}", __package__)
        command = sub.add_parser(name, help=summary, description=(module.__doc__ or summary).strip(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command)
        command.epilog = exit_epilog(statuses_of(module))
        command.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """`prog`: how the user started us; by default derived (checks/invocation.py: `h3kit`, `python -m h3kit`, or
    `python custom_nodes/H3Kit` from a plain clone).

    The one top-level handler of every command: an error no command caught becomes one line on stderr (what
    failed, what to do, where its full traceback was logged) and the documented exit code, never a raw
    traceback; Ctrl-C exits EXIT_INTERRUPTED with one line."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # a library's record too: one escaped line, no traceback
        one_line_records(handler)
    what = prog or cli_command()
    try:
        args = build_parser(prog).parse_args(argv)
        what = f"{what} {args.command}"
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print(f"{what}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line + a crash log, never a traceback
        line, code = unexpected_error(what, exc, pack_version())
        print(line, file=sys.stderr, flush=True)
        return code


if __name__ == "__main__":
    sys.exit(main())
