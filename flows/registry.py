"""The stage registry: every stage's record, in the order its reads and writes give (``ORDER``). The flow runs them
in that order and the ``macco`` verbs run single ones, both through ``flows.runner`` (which owns keys, locks, paths
and the done rule). Adding a stage is adding its record to ``flows.records_data`` or ``flows.records_model``.
Nothing here imports Prefect.
"""
from __future__ import annotations

from flows import records_data, records_model
from flows.stage import Stage


def topological(stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
    """The stages ordered so every stage comes after the writers of what it reads or waits for (declaration order
    among the ready ones); a read nobody writes is an input from outside (the user's data)."""
    writers: dict[str, set[str]] = {}
    for s in stages:
        for w in s.writes:
            writers.setdefault(w, set()).add(s.name)
    deps = {s.name: {w for r in (*s.reads, *s.after) for w in writers.get(r.rstrip("?"), ())} - {s.name}
            for s in stages}
    order: list[Stage] = []
    done: set[str] = set()
    while len(order) < len(stages):
        ready = [s for s in stages if s.name not in done and deps[s.name] <= done]
        if not ready:
            raise ValueError(f"the stages' reads and writes form a cycle among {sorted(set(deps) - done)}")
        order.append(ready[0])
        done.add(ready[0].name)
    return tuple(order)


ORDER: tuple[Stage, ...] = topological((*records_data.STAGES, *records_model.STAGES))
BY_NAME: dict[str, Stage] = {s.name: s for s in ORDER}
STAGES: tuple[str, ...] = tuple(s.name for s in ORDER)
