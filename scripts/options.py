"""The one argparse type of every numeric command-line option (--timeout, --runs, --max-download, ...).

A number that is not finite, or not above zero, is refused while the arguments are parsed: argparse prints
"argument --timeout: ..." and exits 2 (refused before any work), as for any other bad argument. `--timeout nan`
used to mean "never time out" (NaN compares false with everything), `--timeout -1` timed out at once (exit 3) and
`--max-job-download -1` fetched nothing and exited 1.
"""

from __future__ import annotations

import argparse
import math


class Number:
    """`type=Number(float)` (seconds) or `type=Number(int)` (counts, bytes): a finite number greater than 0."""

    def __init__(self, kind: type = float, unit: str = ""):
        self.kind, self.unit = kind, unit
        self.__name__ = "seconds" if kind is float else "whole number"  # argparse names the type in its messages

    def __call__(self, text: str) -> int | float:
        try:
            value = self.kind(text.strip())
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"'{text}' is not {self._wanted()}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"'{text}' is not a finite number; give {self._wanted()}"
                                             + (" (leave the option out for its default)" if self.kind is float else ""))
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} is not above 0; give {self._wanted()}")
        return value

    def _wanted(self) -> str:
        what = "a number greater than 0" if self.kind is float else "a whole number greater than 0"
        return f"{what}{f' ({self.unit})' if self.unit else ''}"


SECONDS = Number(float, "seconds")
COUNT = Number(int)
BYTES = Number(int, "bytes")
