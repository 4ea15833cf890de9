"""Import user code named on the command line: ``path/file.py[:name]`` or ``module:name``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from crashsafe.errors import ConfigError


def import_target(where: str, *, error: type[ConfigError] = ConfigError) -> ModuleType:
    """Import ``where``: a ``.py`` path (or any path with a slash) or a module name."""
    if where.endswith(".py") or "/" in where:
        path = Path(where)
        if not path.is_file():
            raise error(f"file {path} does not exist")
        name = f"crashsafe_user_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise error(f"cannot import {path}: is it a .py file?")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:
            raise error(f"importing {path} failed: {type(exc).__name__}: {exc}") from None
        return module
    try:
        return importlib.import_module(where)
    except ImportError as exc:
        raise error(
            f"cannot import module {where!r}: {exc}. Use path/file.py:name or module:name"
        ) from exc
