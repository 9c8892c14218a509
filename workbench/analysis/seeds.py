"""The three seed cases (docs/engine-facts.md#crash-reports-and-fixes), as probe cases (JSON-shaped dicts).

Each entry holds the case before and after its engine fix and the outcome the engine gave for
both, so the main job, the notebooks and the tests reproduce the same three stories. The two table
seeds are declared by their backends (``backends/``); the allocator's is here.
"""

from __future__ import annotations

from workbench import backends

# The two table seeds, as their backends declare them (the block tables', then DSA's).
QWQ_NPU, GLM_DSA = (seed for b in backends.table_backends() if b.in_defaults for seed in b.seeds)

# ... and the allocator's, as the NPU allocator declares it.
(EXACT_FIT,) = backends.allocator_seeds()

SEEDS = (QWQ_NPU, GLM_DSA, EXACT_FIT)  # the three seeds, in the order docs/semantics.md gives them
# Every backend's worked cases beyond the three seeds (FA3's over-read, ...), for the report.
WORKED_CASES = tuple(s for s in backends.seeds() if s not in SEEDS)


def boundary_case(case: dict[str, object]) -> dict[str, object]:
    """The same configuration without its batch, for ``workbench boundary``."""
    return {k: v for k, v in case.items() if k != "seq_lens"}
