"""Where a ComfyUI keeps its model files, found from outside it (doctor): for each folder key, the folders that
ComfyUI searches, in its order (the first is where a new file goes).

Three ways to know, strongest first:
  - the running server's own table (`--server`): GET /experiment/models, else GET /internal/folder_paths;
  - a models folder the user names (`--models-dir`): its standard subfolders;
  - found on this machine: the base folder of the ComfyUI this clone sits in (`<base>/custom_nodes/<clone>`, a
    checkout or a `--base-directory` whose models/ may not exist yet: then every file is missing from it), else
    $COMFYUI_DIR or the current folder and the folders above it, else ComfyUI Desktop's base path; plus the
    extra_model_paths.yaml files that ComfyUI reads there (the checkout's own, ComfyUI Desktop's
    extra_models_config.yaml, and `--extra-model-paths-config` files), applied as ComfyUI applies them
    (utils/extra_config.py of 0.33.0: base_path relative to the file, ~ and $VARS expanded, one folder per line,
    `is_default` folders first, legacy keys unet/clip mapped to diffusion_models/text_encoders).

ComfyUI Desktop (Comfy-Org/desktop) keeps its settings in its user-data folder (%APPDATA%\\ComfyUI on Windows,
~/Library/Application Support/ComfyUI on macOS, $XDG_CONFIG_HOME or ~/.config/ComfyUI on Linux): config.json holds
`basePath` (models/, custom_nodes/, input/, output/ live there) and extra_models_config.yaml the model folders it
passes to ComfyUI with --extra-model-paths-config.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checks.environment import PACK_ROOT, find_comfyui
from ..checks.model_files import (
    FOLDER_ALIASES,
    FOLDER_TABLE_ROUTES,
    HOST_FOLDER_KEY,
    folder_table,
    served_folders,
)
from ..checks.problem import WARN, Check, printable
from . import bounded_json
from .files import open_regular, os_reason

MAX_CONFIG_BYTES = 2**20  # an extra_model_paths.yaml or Desktop's config.json; real ones are < 10 kB
EXTRA_PATHS_FILE = "extra_model_paths.yaml"  # what ComfyUI reads next to its main.py
DESKTOP_CONFIG = "config.json"
DESKTOP_EXTRA_PATHS = "extra_models_config.yaml"


@dataclass(frozen=True)
class ModelLayout:
    """One ComfyUI's model folders. `models_dir`: the models/ folder whose standard subfolders are searched (None
    for a server's table); `first` / `extra`: a config's folders before / after them, by ComfyUI folder key;
    `served`: the server's own table (then nothing else applies); `source`: how it was found, for messages."""

    source: str
    models_dir: Path | None = None
    first: Mapping[str, tuple[Path, ...]] = field(default_factory=dict)
    extra: Mapping[str, tuple[Path, ...]] = field(default_factory=dict)
    served: Mapping[str, list[str]] | None = None

    def folders(self, key: str) -> tuple[Path, ...]:
        """The folders searched for a loader's folder key, in order; the first is where a new file goes (on a
        server: its folder named like the README's, when it has one)."""
        host_key = HOST_FOLDER_KEY.get(key, key)
        if self.served is not None:
            return tuple(Path(f) for f in served_folders(dict(self.served), key))
        standard = [self.models_dir / sub for sub in FOLDER_ALIASES.get(key, (key,))] if self.models_dir else []
        return tuple(dict.fromkeys([*self.first.get(host_key, ()), *standard, *self.extra.get(host_key, ())]))


def desktop_user_data(env: Mapping[str, str] | None = None, platform: str | None = None) -> Path | None:
    """ComfyUI Desktop's user-data folder on this platform (Electron's userData for the app 'ComfyUI')."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if platform == "win32":
        return Path(env["APPDATA"]) / "ComfyUI" if env.get("APPDATA") else None
    home = env.get("HOME")
    if platform == "darwin":
        return Path(home) / "Library" / "Application Support" / "ComfyUI" if home else None
    config = env.get("XDG_CONFIG_HOME") or (str(Path(home) / ".config") if home else "")
    return Path(config) / "ComfyUI" if config else None


def _read_text(path: Path, what: str) -> str:
    """A small config file's text (a regular file, at most MAX_CONFIG_BYTES, UTF-8); OSError or ValueError."""
    with open_regular(path) as handle:
        data = handle.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{what} {path} is over {MAX_CONFIG_BYTES} bytes; a real one is a few kB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def desktop_base(user_data: Path) -> Path | None:
    """The base path ComfyUI Desktop stores in its config.json; None when there is no Desktop config here.
    Raises ValueError naming the file when it is there but unreadable."""
    path = user_data / DESKTOP_CONFIG
    if not path.exists():
        return None
    try:
        config = bounded_json.loads(_read_text(path, "ComfyUI Desktop's config"), f"ComfyUI Desktop's config {path}",
                                    max_depth=16)
    except OSError as exc:
        raise ValueError(f"ComfyUI Desktop's config {path} {os_reason(exc)}") from exc
    base = config.get("basePath") if isinstance(config, dict) else None
    return Path(base) if isinstance(base, str) and base else None


def read_extra_paths(path: Path) -> list[tuple[str, Path, bool]]:
    """(ComfyUI folder key, folder, is_default) for every folder an extra_model_paths.yaml adds, as ComfyUI reads
    it. Raises ValueError naming the file and the problem (not YAML, not a mapping, PyYAML missing)."""
    try:
        import yaml  # ComfyUI's own dependency; ours too (pyproject), imported only when a config is read
    except ImportError as exc:
        raise ValueError(f"{path} cannot be read: PyYAML is not installed in this Python (ComfyUI's Python has "
                         "it: run doctor with that one, or pip install pyyaml)") from exc
    try:
        config = yaml.safe_load(_read_text(path, "the model-paths config"))
    except OSError as exc:
        raise ValueError(f"the model-paths config {path} {os_reason(exc)}") from exc
    except (yaml.YAMLError, RecursionError) as exc:
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"{path} is not valid YAML ({printable(first_line)})") from exc
    if config is None:
        return []
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a YAML mapping of sections (ComfyUI's extra_model_paths.yaml layout)")
    here = path.parent.absolute()
    found: list[tuple[str, Path, bool]] = []
    for section in config.values():
        if not isinstance(section, dict):
            continue
        base_text = section.get("base_path")
        base = None
        if isinstance(base_text, str) and base_text:
            base = Path(os.path.expandvars(os.path.expanduser(base_text)))
            base = base if base.is_absolute() else here / base
        default = bool(section.get("is_default"))  # ComfyUI tests it for truth
        for key, value in section.items():
            if key in ("base_path", "is_default") or not isinstance(key, str) or not isinstance(value, str):
                continue
            for line in value.split("\n"):
                if line:
                    folder = (base / line) if base is not None else (Path(line) if Path(line).is_absolute() else here / line)
                    found.append((HOST_FOLDER_KEY.get(key, key), Path(os.path.normpath(folder)), default))
    return found


def with_configs(layout: ModelLayout, configs: Iterable[Path]) -> tuple[ModelLayout, list[Check]]:
    """The layout with each config's folders added as ComfyUI adds them (in order; is_default ones in front).
    A config that cannot be read is a WARN naming it; the others still apply."""
    first: dict[str, list[Path]] = {k: list(v) for k, v in layout.first.items()}
    extra: dict[str, list[Path]] = {k: list(v) for k, v in layout.extra.items()}
    notes, read = [], []
    for config in configs:
        try:
            entries = read_extra_paths(config)
        except ValueError as exc:
            notes.append(Check(WARN, "model folders", f"{exc}; its folders are not searched",
                               "fix the file (ComfyUI cannot read it either), or pass --models-dir"))
            continue
        read.append(str(config))
        for key, folder, default in entries:
            if default:
                first.setdefault(key, []).insert(0, folder)
            else:
                extra.setdefault(key, []).append(folder)
    source = layout.source + (f", with the folders of {', '.join(read)}" if read else "")
    return ModelLayout(source, layout.models_dir, {k: tuple(v) for k, v in first.items()},
                       {k: tuple(v) for k, v in extra.items()}), notes


def _typed_clone(argv0: str | None) -> Path | None:
    """The clone's folder as typed (`python custom_nodes/H3Kit ...`), symbolic links kept: a clone linked into a
    --base-directory's custom_nodes resolves to somewhere else."""
    if not argv0:
        return None
    typed = Path(os.path.abspath(argv0))
    typed = typed.parent if typed.name == "__main__.py" else typed
    return typed if (typed / "__main__.py").is_file() else None


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):
        return False


def find_layout(env: Mapping[str, str] | None = None, cwd: Path | None = None, argv0: str | None = None,
                configs: Sequence[Path] = (), platform: str | None = None) -> tuple[ModelLayout | None, list[Check]]:
    """This machine's ComfyUI model folders, found as the module docstring says; (None, notes) when no ComfyUI is
    found here. `configs`: --extra-model-paths-config files, read after the ones found."""
    env = os.environ if env is None else env
    argv0 = (sys.argv[0] if sys.argv else None) if argv0 is None else argv0
    notes: list[Check] = []
    user_data = desktop_user_data(env, platform)
    try:
        desktop = desktop_base(user_data) if user_data is not None else None
    except ValueError as exc:
        notes.append(Check(WARN, "model folders", f"{exc}; ComfyUI Desktop's folders are not searched",
                           "pass --models-dir with Desktop's models folder"))
        desktop = None
    base, how = None, ""
    for clone in (PACK_ROOT, _typed_clone(argv0)):
        if clone is not None and clone.parent.name == "custom_nodes":
            base, how = clone.parent.parent, f"the ComfyUI folder this clone sits in ({clone})"
            break
    if base is None:
        found = find_comfyui(dict(env), cwd)
        if found is not None:
            base, how = found, "the ComfyUI folder found from $COMFYUI_DIR or the current folder"
    if base is None and desktop is not None:
        base, how = desktop, f"ComfyUI Desktop's base path ({user_data / DESKTOP_CONFIG})"
    if base is None:
        return None, notes
    found_configs = [base / EXTRA_PATHS_FILE] if (base / "main.py").is_file() else []
    code_dir = find_comfyui(dict(env), cwd)  # a --base-directory user running doctor from the ComfyUI checkout
    if code_dir is not None and (code_dir / "main.py").is_file() and not _same(code_dir, base):
        found_configs.append(code_dir / EXTRA_PATHS_FILE)
    found_configs = [c for c in found_configs if c.exists()]
    if desktop is not None and user_data is not None and _same(desktop, base):
        found_configs.append(user_data / DESKTOP_EXTRA_PATHS)
    layout, more = with_configs(ModelLayout(f"{base / 'models'} ({how})", base / "models"),
                                [*found_configs, *configs])
    return layout, notes + more


def models_dir_layout(models_dir: Path, configs: Sequence[Path] = ()) -> tuple[ModelLayout, list[Check]]:
    """--models-dir DIR: DIR's standard subfolders, plus any --extra-model-paths-config."""
    return with_configs(ModelLayout(f"{models_dir} (--models-dir)", Path(models_dir)), configs)


def served_layout(fetch: Any, server: str) -> ModelLayout | None:
    """The running server's own folder table (`fetch(route)`: its JSON answer, None when it cannot answer); None
    when it serves neither route."""
    for route in FOLDER_TABLE_ROUTES:
        table = folder_table(fetch(route))
        if table:
            return ModelLayout(f"the folders {server} reports ({route})", served=table)
    return None
