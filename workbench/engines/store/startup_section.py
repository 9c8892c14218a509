"""A release's ``startup`` section read back: which of the atlas's settings its start-up checks refuse.

``startup_learn`` asks a release's own start-up checks about every atlas setting and writes the
answers to its learned file (section ``startup``, one cell per backend, speculative recipe and page
size: ``"accepted"`` or ``"refused: <message> (<function>)"``). This module only reads them, for
the atlas and the history (``refusal``, ``row_refusal``, ``started``), and names a recipe the one
way both sides key it (``recipe_key``). Imported by ``startup_learn`` and ``analysis`` (atlas,
history); imports the learned files (``learned``), the backend registry (a row's label to its
backend) and the geometry, nothing that runs an engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench import backends
from workbench.engines.store import learned
from workbench.model.geometry import ServingGeometry

SECTION = "startup"


def recipe_key(g: ServingGeometry) -> str:
    """The speculative recipe of ``g`` as one word: ``off``, ``NGRAM-D-steps-topk``, ``EAGLE-D-steps-topk``."""
    return recipe_word(g.draft_tokens, g.spec_steps, g.spec_topk, g.draft_has_kv)


def recipe_word(draft_tokens: int, spec_steps: int, spec_topk: int, draft_has_kv: bool) -> str:
    if draft_tokens == 0:
        return "off"
    return f"{'EAGLE' if draft_has_kv else 'NGRAM'}-{draft_tokens}-{spec_steps}-{spec_topk}"


def refusal(engine: str, backend: str, recipe: str, page_size: int) -> str | None:
    """The engine's start-up refusal of ``recipe`` (``recipe_word``) at ``page_size`` on ``backend``
    (its message), None when it starts it or when the release's start-up checks were never asked
    about it (no ``startup`` section, or not that setting)."""
    section = learned.section(engine.split("+", 1)[0], SECTION) or {}
    said = section.get("settings", {}).get("value", {}).get(backend, {}).get(recipe, {}).get(str(page_size))
    return said[len("refused: "):] if isinstance(said, str) and said.startswith("refused: ") else None


def row_refusal(row: Mapping[str, Any]) -> str | None:
    """The engine's start-up refusal of an atlas row's setting (its message), None when its release
    starts it or was never asked (``refusal``)."""
    names = {label: backend.name for backend in backends.table_backends() for label in (backend.name, backend.label)}
    backend = names.get(str(row["backend"]), str(row["backend"]))  # a pooled buffer's row names its backend
    recipe = recipe_word(int(str(row["draft_tokens"])), int(str(row["spec_steps"])), int(str(row["spec_topk"])),
                         bool(row["draft_has_kv"]))
    return refusal(str(row["engine"]), backend, recipe, int(str(row["page_size"])))


def started(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The atlas rows whose setting the row's release starts, and how many it refuses."""
    kept = [row for row in rows if row_refusal(row) is None]
    return kept, len(rows) - len(kept)


def learned_for(engine: str) -> bool:
    """Whether ``engine``'s start-up checks were asked (its learned file has the section)."""
    return learned.section(engine.split("+", 1)[0], SECTION) is not None
