"""Ray as a vLLM server sees it when it has just started: importable, and not initialized.

vLLM's image (``vllm/vllm-openai``) ships Ray, and a release's resolution asks two things of it
when a command sets no ``--distributed-executor-backend`` and its world is larger than one GPU
(``ParallelConfig.__post_init__``, and ``EngineArgs.create_engine_config`` through
``vllm/ray/lazy_utils.py``):

* whether Ray can be imported (``ray_utils.ray_is_available()``): up to 0.11.0, a world larger
  than the node's GPUs then runs on Ray (without it, the release refuses the command); later
  releases refuse such a world unless the command names Ray itself;
* whether this process has joined a Ray cluster (``ray.is_initialized()``): a server that has
  just started has not (it calls ``ray.init`` later, when it builds its Ray executor, which a
  resolution never reaches), so the world that fits on the node runs on multiprocessing.

The checker's own environment may or may not have Ray (it is the workbench's optional ``ray``
extra); the answer must not depend on it. So an engine process always gets this stand-in in
place of the real library (``install``): a permissive module (``standins.StandInModule``: any
name imports, and calling one once loading is over raises ``StandInCalled``, as for every library
that is not there) whose one real answer is ``is_initialized() -> False``. Nothing about the
engine's buffers depends on it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence

from workbench.engines.sandbox.standins import StandInModule


def is_initialized() -> bool:
    """``ray.is_initialized()`` in a server process that has not called ``ray.init``."""
    return False


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = StandInModule(spec.name)
        module.__path__ = []  # a package: ``from ray.util.placement_group import PlacementGroup`` imports
        if spec.name == "ray":
            module.is_initialized = is_initialized  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class Finder(importlib.abc.MetaPathFinder):
    """Finds ``ray`` and everything under it, for every importer, before any installed Ray."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] != "ray":
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)


def install() -> Finder:
    """Register the stand-in first on ``sys.meta_path`` (before Ray is imported); return its finder."""
    finder = Finder()
    sys.meta_path.insert(0, finder)
    return finder
