"""The one plugin manager (pluggy's, as in simonw/llm, pytest and hatch).

Model families, per-generation artifacts and store URL schemes all come from the hooks of
`HookSpecs`, built-ins and third-party plugins alike.

A plugin is a module (or any object) with functions marked `@hookimpl`, named as the hooks below.
It is loaded, once per process at the first use of any registry, from the `lgpt_index` entry-point
group of the installed packages, then from the modules named in $LGPT_PLUGINS (comma-separated;
subprocesses inherit it: the CLI's, `serve`'s, Ray's workers). Each registry (models/families.py,
index/artifacts.py, index/open.py) passes its own built-in modules on its first use; their hookimpls
are `trylast`, so that `collected` lists the built-ins first and a plugin's entry replaces a
built-in's of the same name. A test adds or removes a plugin with `plugin_manager().register(...)`
and `.unregister(...)`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from importlib import import_module
from types import ModuleType
from typing import Any

import pluggy

from .errors import EnvironmentMissing

PROJECT = "lgpt_index"
ENTRY_POINT_GROUP = "lgpt_index"
PLUGINS_ENV = "LGPT_PLUGINS"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class HookSpecs:
    """What a plugin may add: each hook returns an iterable of the registry's items (or None)."""

    @hookspec
    def lgpt_families(self) -> Iterable[Any] | None:
        """Model families (`localgpt_index.models.families.Family`), each with its loader or its own encoder."""

    @hookspec
    def lgpt_artifacts(self) -> Iterable[Any] | None:
        """Per-generation artifacts (`localgpt_index.index.artifacts.Artifact`): every transaction writes them."""

    @hookspec
    def lgpt_store_schemes(self) -> Iterable[Any] | None:
        """Store URL schemes (`localgpt_index.index.open.StoreScheme`): what `--store URL` opens."""


_lock = threading.RLock()  # a plugin that reads a registry while it is imported gets the manager as loaded so far
_manager: pluggy.PluginManager | None = None
_built_ins: set[str] = set()  # registered once a process: a test may unregister one for a while


def plugin_manager(*built_ins: ModuleType) -> pluggy.PluginManager:
    """The process's plugin manager, its plugins loaded at the first call (again at the next, where
    one could not be imported); `built_ins` (a registry's own modules) registered at their first mention."""
    global _manager
    with _lock:
        if _manager is None:
            _manager = manager = pluggy.PluginManager(PROJECT)
            manager.add_hookspecs(HookSpecs)
            try:
                _load_plugins(manager)
            except BaseException:
                _manager = None
                raise
        for module in built_ins:
            if module.__name__ not in _built_ins:
                _built_ins.add(module.__name__)
                _manager.register(module)
        return _manager


def _load_plugins(manager: pluggy.PluginManager) -> None:
    """The entry points of the `lgpt_index` group, then the modules of $LGPT_PLUGINS (each once)."""
    try:
        manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    except ImportError as exc:
        raise EnvironmentMissing(f"a plugin of the {ENTRY_POINT_GROUP} entry-point group cannot be imported ({exc}).",
                                 hint="Reinstall or uninstall the package that declares it.") from None
    for name in filter(None, (part.strip() for part in os.environ.get(PLUGINS_ENV, "").split(","))):
        try:
            module = import_module(name)
        except ImportError as exc:
            raise EnvironmentMissing(f"{PLUGINS_ENV}: the plugin module {name} cannot be imported ({exc}).",
                                     hint=f"Install it, or remove it from {PLUGINS_ENV}.") from None
        if not manager.is_registered(module):
            manager.register(module, name)


def collected(results: list[Iterable[Any]]) -> list[Any]:
    """A hook's results, flattened in registration order (pluggy calls the last registered first):
    the built-ins (trylast) first, then the plugins as they registered."""
    return [item for result in reversed(results) for item in result]
