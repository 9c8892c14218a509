"""Each release's reach rule read once per atlas, and each reach computed once per what it rests on.

``analysis.reach.rule_for`` finds a release's scheduler facts by reading the learned file of every
release of its engine (the nearest learned one stands in for a release never learned), so one call
costs forty-odd file lookups; the atlas asks for the reach of every row of every release, tens of
thousands of times, and those lookups were nearly all of its time. ``Reaches`` keeps, for one atlas
computation, each release's rule (``rule_for``, with the what-if ``overshoot`` applied) and each
reach already computed: the same values ``default_reach`` and ``reqtable.where`` give, without the
lookups. It lives as long as one computation (a learned file written later is read by the next).
"""

from __future__ import annotations

from workbench.analysis.reach import Conditions, Reach, ReachRule, reach, rule_for
from workbench.model.geometry import Mode, ServingGeometry


class Reaches:
    """``default_reach`` memoized for one atlas computation at one ``overshoot``."""

    def __init__(self, overshoot: int | None = None) -> None:
        self.overshoot = overshoot
        self._rules: dict[str, ReachRule] = {}
        self._found: dict[tuple[str, ServingGeometry, Mode, int, str | None], Reach] = {}

    def rule(self, engine: str) -> ReachRule:
        """``rule_for(engine).with_overshoot(overshoot)``, read once."""
        if engine not in self._rules:
            self._rules[engine] = rule_for(engine).with_overshoot(self.overshoot)
        return self._rules[engine]

    def at(self, engine: str, g: ServingGeometry, mode: Mode, step_id: int = 0, algorithm: str | None = None) -> Reach:
        """``default_reach(engine, g, mode, step_id, algorithm=algorithm, overshoot=overshoot)``."""
        key = (engine, g, mode, step_id, algorithm)
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = reach(self.rule(engine), g, mode, step_id, Conditions(algorithm=algorithm))
        return found
