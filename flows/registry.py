"""The stage registry: every stage's record, in the order its reads and writes give (``ORDER``). The flow runs them
in that order and the ``macco`` verbs run single ones, both through ``flows.runner`` (which owns keys, locks, paths
and the done rule). Adding a stage is adding its record to ``flows.records_data`` or ``flows.records_model``.
Nothing here imports Prefect.
"""
from __future__ import annotations

from flows import records_data, records_model
from flows.config import FLOW_SECTIONS, sections
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


def check_sections(order: tuple[Stage, ...], declared: dict[str, type]) -> None:
    """The config's stage sections are the records': each record's ``section`` a field of ``FlowConfig`` of its
    ``config`` type, and the sections in the registry's order (the flow's own after them); else one line."""
    ours = {k: v for k, v in declared.items() if k not in FLOW_SECTIONS}
    wanted = list(dict.fromkeys(s.section for s in order))
    if list(ours) != wanted:
        raise ValueError(f"flows.config.FlowConfig's stage sections {list(ours)} are not the registry's {wanted} "
                         "(one field per record's section, in the registry's order)")
    for s in order:
        if ours[s.section] is not s.config:
            raise ValueError(f"stage {s.name}: its config {getattr(s.config, '__name__', s.config)} is not the type "
                             f"of FlowConfig.{s.section} ({ours[s.section].__name__})")


check_sections(ORDER, sections())
