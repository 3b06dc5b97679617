"""Transactional anomalies in a list-append history, found as Jepsen's Elle finds them.

Each transaction appends unique values to lists (keys) and reads whole lists. A read reveals the
order in which the appends before it took effect, so the version order of each key is the
longest list ever read (every other read must be a prefix of it: else an incompatible order).
From the orders, three dependencies between committed transactions (Adya's, at item level):

- ww: T1 appended the element just before the one T2 appended to the same key;
- wr: T2 read a list whose last element T1 appended;
- rw: T1 read a list whose next element (in the key's version order) T2 appended.

A cycle among them is an anomaly, named by the edges it needs: only ww (G0, a write cycle),
ww and wr (G1c, circular information flow), exactly one rw (G-single, read skew) or more
(G2-item, write skew and worse). Besides cycles: a read of an aborted transaction's append
(G1a), a read ending at an append its writer followed with another to the same key (G1b),
reads that no single order explains, an element appended twice, and a transaction that does
not see its own appends (internal). Each cycle is reported as the shortest one of its kind in
its strongly connected component, as the transactions and the steps that link them.

Pure: a function of the transactions; the cycle search is networkx's (shortest paths in
filtered views of one graph).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import networkx as nx

from rsdrill.history import TXN_PROBE, Op, of_probes

Status = Literal["ok", "fail", "info"]
# Transactions by id; each edge's `steps` holds the step that shows each of its relations.
Graph: TypeAlias = "nx.DiGraph[int]"
Rel = Literal["ww", "wr", "rw"]
CYCLE_TYPES = ("G0", "G1c", "G-single", "G2-item")
Model = Literal["snapshot-isolation", "serializable"]
ALLOWED: dict[str, frozenset[str]] = {
    # Adya's PL-SI, which MongoDB's transactions claim: write skew (G2-item) is allowed.
    "snapshot-isolation": frozenset({"G2-item"}),
    "serializable": frozenset(),
}
"""The cycles each consistency model allows (everything else found is an anomaly)."""
# The order edges are named in when two relations join the same pair: a cycle is named by the
# weakest relation each step needs.
_STRENGTH: dict[Rel, int] = {"ww": 0, "wr": 1, "rw": 2}
# Candidate edges tried per component and anomaly type when looking for the shortest cycle.
_TRIES = 64


@dataclass(frozen=True)
class Append:
    key: Any
    value: Any


@dataclass(frozen=True)
class Read:
    key: Any
    value: tuple[Any, ...] | None
    """The list read; None when not known (an indeterminate transaction's read)."""


Mop = Append | Read


@dataclass(frozen=True)
class Txn:
    """One transaction as the client saw it end: committed (ok), aborted (fail) or unknown
    (info: it may or may not have taken effect)."""

    id: int
    mops: tuple[Mop, ...]
    status: Status = "ok"
    process: int = 0


@dataclass(frozen=True)
class Step:
    """One edge of a cycle: `rel` on `key`, from the element `value` to `next_value` (ww, rw)
    or by the element `value` (wr); None is the key's initial, empty state."""

    rel: Rel
    key: Any
    value: Any
    next_value: Any = None


@dataclass(frozen=True)
class Cycle:
    type: str
    txns: tuple[int, ...]
    """The transactions in cycle order, the first repeated at the end."""
    steps: tuple[Step, ...]

    def path(self) -> str:
        """The transactions and the steps between them: `T12 -rw x-> T10 ...`."""
        parts = [f"T{self.txns[0]}"]
        for step, txn in zip(self.steps, self.txns[1:], strict=True):
            parts.append(f"-{step.rel} {step.key}-> T{txn}")
        return " ".join(parts)

    def words(self) -> str:
        """The cycle with its type: `G-single: T12 -rw x-> T10 ...`."""
        return f"{self.type}: {self.path()}"


@dataclass
class ElleReport:
    cycles: list[Cycle] = field(default_factory=list)
    aborted_reads: list[dict[str, Any]] = field(default_factory=list)  # G1a
    intermediate_reads: list[dict[str, Any]] = field(default_factory=list)  # G1b
    incompatible_orders: list[dict[str, Any]] = field(default_factory=list)
    duplicate_elements: list[dict[str, Any]] = field(default_factory=list)
    internal: list[dict[str, Any]] = field(default_factory=list)

    @property
    def cases(self) -> dict[str, list[dict[str, Any]]]:
        """The anomalies that are not cycles, by name."""
        return {"G1a": self.aborted_reads, "G1b": self.intermediate_reads,
                "incompatible-order": self.incompatible_orders,
                "duplicate-elements": self.duplicate_elements,
                "internal": self.internal}  # fmt: skip

    @property
    def anomaly_types(self) -> list[str]:
        found = {c.type for c in self.cycles}
        found.update(name for name, cases in self.cases.items() if cases)
        return sorted(found)

    @property
    def valid(self) -> bool:
        return not self.anomaly_types

    def first_case(self, kind: str) -> str:
        """The first case of a non-cycle anomaly, in words."""
        cases = self.cases.get(kind) or [{}]
        return f"{kind}: " + ", ".join(f"{k} {v}" for k, v in cases[0].items())

    @property
    def count(self) -> int:
        """Every anomaly found: each cycle and each case of the others."""
        return len(self.cycles) + sum(len(cases) for cases in self.cases.values())


def txns_from_ops(ops: Sequence[Op]) -> list[Txn]:
    """The transactions probe's attempts (probe "txn", rsdrill/probes/transactions.py) as
    transactions, in the order they began."""
    txns = []
    for i, op in enumerate(sorted(of_probes(ops, TXN_PROBE), key=lambda o: o.t_start)):
        mops: list[Mop] = []
        for f, key, value in op.detail.get("mops", []):
            if f == "append":
                mops.append(Append(key, value))
            else:
                mops.append(Read(key, None if value is None else tuple(value)))
        status = op.detail.get("status", "info")
        txns.append(Txn(i, tuple(mops), status, op.detail.get("client", 0)))
    return txns


def check(txns: Sequence[Txn], model: Model = "serializable") -> ElleReport:
    """Every anomaly of a list-append history that `model` forbids (see the module's words);
    snapshot isolation allows write skew (G2-item), so it is not searched for."""
    report = ElleReport()
    by_id = {t.id: t for t in txns}
    report.internal = _internal(txns)
    report.duplicate_elements = _duplicates(txns)
    orders, report.incompatible_orders = _version_orders(txns)
    writer = _writers(txns)
    report.aborted_reads, report.intermediate_reads = _bad_reads(txns, writer, by_id)
    graph = _dependencies(txns, orders, writer, by_id)
    report.cycles = _cycles(graph, [k for k in CYCLE_TYPES if k not in ALLOWED[model]])
    return report


# -- what a history says before any graph --------------------------------------------------------


def _internal(txns: Iterable[Txn]) -> list[dict[str, Any]]:
    """Reads that do not end with the transaction's own earlier appends to the key."""
    found = []
    for txn in txns:
        if txn.status == "fail":
            continue
        mine: dict[Any, list[Any]] = {}
        for mop in txn.mops:
            if isinstance(mop, Append):
                mine.setdefault(mop.key, []).append(mop.value)
            elif mop.value is not None and mine.get(mop.key):
                own = mine[mop.key]
                if list(mop.value[-len(own) :]) != own:
                    found.append({"txn": txn.id, "key": mop.key, "read": list(mop.value),
                                  "expected_suffix": list(own)})  # fmt: skip
                mine[mop.key] = []  # later reads need only what it appends after this one
    return found


def _duplicates(txns: Iterable[Txn]) -> list[dict[str, Any]]:
    """Reads that show an element twice (each appended value is unique)."""
    found = []
    for txn in txns:
        for mop in txn.mops:
            if isinstance(mop, Read) and mop.value is not None:
                counts = Counter(mop.value)
                dups = sorted(v for v, n in counts.items() if n > 1)
                if dups:
                    found.append({"txn": txn.id, "key": mop.key, "duplicates": dups})
    return found


def _version_orders(txns: Iterable[Txn]) -> tuple[dict[Any, list[Any]], list[dict[str, Any]]]:
    """Each key's version order (its longest read; a key appended once and never read: that
    one element) and the keys whose reads are not prefixes of one another."""
    reads: dict[Any, set[tuple[Any, ...]]] = defaultdict(set)
    appends: dict[Any, list[Any]] = defaultdict(list)
    for txn in txns:
        for mop in txn.mops:
            if isinstance(mop, Read):
                if mop.value and txn.status != "fail":
                    reads[mop.key].add(mop.value)
            else:
                appends[mop.key].append(mop.value)
    orders: dict[Any, list[Any]] = {}
    incompatible = []
    for key, seen in reads.items():
        ordered = sorted(seen, key=len)
        longest = ordered[-1]
        if any(v != longest[: len(v)] for v in ordered):
            incompatible.append({"key": key, "values": [list(v) for v in ordered]})
        orders[key] = list(dict.fromkeys(longest))
    for key, appended in appends.items():
        if key not in orders and len(appended) == 1:
            orders[key] = list(appended)
    return orders, incompatible


def _writers(txns: Iterable[Txn]) -> dict[tuple[Any, Any], int]:
    """(key, element) → the transaction that appended it."""
    return {(m.key, m.value): t.id for t in txns for m in t.mops if isinstance(m, Append)}


def _bad_reads(
    txns: Iterable[Txn], writer: dict[tuple[Any, Any], int], by_id: dict[int, Txn]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """G1a: a committed read of an element an aborted transaction appended; G1b: a committed
    read ending at an element its writer followed with another append to the same key."""
    aborted, intermediate = [], []
    for txn in txns:
        if txn.status != "ok":
            continue
        for mop in txn.mops:
            if not isinstance(mop, Read) or not mop.value:
                continue
            for element in mop.value:
                who = writer.get((mop.key, element))
                if who is not None and who != txn.id and by_id[who].status == "fail":
                    aborted.append({"txn": txn.id, "writer": who, "key": mop.key,
                                    "element": element})  # fmt: skip
            last = mop.value[-1]
            who = writer.get((mop.key, last))
            if who is None or who == txn.id or by_id[who].status == "fail":
                continue
            own = [m.value for m in by_id[who].mops if isinstance(m, Append) and m.key == mop.key]
            if own[-1] != last:
                intermediate.append({"txn": txn.id, "writer": who, "key": mop.key,
                                     "element": last})  # fmt: skip
    return aborted, intermediate


# -- the dependency graph ------------------------------------------------------------------------


def _dependencies(
    txns: Sequence[Txn],
    orders: dict[Any, list[Any]],
    writer: dict[tuple[Any, Any], int],
    by_id: dict[int, Txn],
) -> Graph:
    """ww, wr and rw edges between transactions that may have taken effect (ok and info);
    each edge keeps, per relation, the step that shows it."""
    graph: Graph = nx.DiGraph()
    position = {key: {v: i for i, v in enumerate(order)} for key, order in orders.items()}
    # (key, last element read or None for the empty list) → the transactions that read it.
    readers: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for txn in txns:
        if txn.status == "fail":
            continue
        graph.add_node(txn.id)
        for mop in txn.mops:
            if isinstance(mop, Read) and mop.value is not None:
                readers[(mop.key, mop.value[-1] if mop.value else None)].append(txn.id)

    def link(a: int, b: int, step: Step) -> None:
        if a == b or by_id[a].status == "fail" or by_id[b].status == "fail":
            return
        if graph.has_edge(a, b):
            graph[a][b]["steps"].setdefault(step.rel, step)
        else:
            graph.add_edge(a, b, steps={step.rel: step})

    for txn in txns:
        if txn.status == "fail":
            continue
        for mop in txn.mops:
            if isinstance(mop, Read):
                if mop.value:
                    last = mop.value[-1]
                    who = writer.get((mop.key, last))
                    if who is not None:
                        link(who, txn.id, Step("wr", mop.key, last))
                continue
            previous = _previous(orders.get(mop.key, []), position.get(mop.key, {}), mop.value)
            if previous is not None:
                who = writer.get((mop.key, previous))
                if who is not None:
                    link(who, txn.id, Step("ww", mop.key, previous, mop.value))
            for reader in readers.get((mop.key, previous), ()):
                link(reader, txn.id, Step("rw", mop.key, previous, mop.value))
    return graph


def _previous(order: list[Any], position: dict[Any, int], element: Any) -> Any:
    """The element appended just before `element` (None: the initial, empty list). An element
    no read shows came after every element the reads show."""
    at = position.get(element)
    if at is None:
        return order[-1] if order else None
    return order[at - 1] if at > 0 else None


# -- cycles --------------------------------------------------------------------------------------

_ALLOWED: dict[str, frozenset[Rel]] = {
    "G0": frozenset({"ww"}),
    "G1c": frozenset({"ww", "wr"}),
    "G-single": frozenset({"ww", "wr"}),  # the path back; its one rw edge closes it
    "G2-item": frozenset({"ww", "wr", "rw"}),
}
_CLOSING: dict[str, Rel] = {"G0": "ww", "G1c": "wr", "G-single": "rw", "G2-item": "rw"}


def _cycles(graph: Graph, kinds: Sequence[str]) -> list[Cycle]:
    found = []
    for component in nx.strongly_connected_components(graph):
        if len(component) < 2:
            continue
        sub = graph.subgraph(component)
        for kind in kinds:
            cycle = _shortest_cycle(sub, kind)
            if cycle is not None:
                found.append(cycle)
    return found


def _view(graph: Graph, allowed: frozenset[Rel]) -> Graph:
    def keep(a: int, b: int) -> bool:
        return bool(allowed & graph[a][b]["steps"].keys())

    return nx.subgraph_view(graph, filter_edge=keep)


def _shortest_cycle(graph: Graph, kind: str) -> Cycle | None:
    """The shortest cycle of `kind` in one component: an edge of its closing relation, then the
    shortest way back through the relations it allows."""
    closing, back = _CLOSING[kind], _view(graph, _ALLOWED[kind])
    best: list[int] | None = None
    # In a stable order (the first transaction first), so that the same history always names
    # the same cycle, as Elle does.
    candidates = sorted((a, b) for a, b in graph.edges if closing in graph[a][b]["steps"])
    for a, b in candidates[:_TRIES]:
        try:
            cycle = [a, *nx.shortest_path(back, b, a)]
        except nx.NetworkXNoPath:
            continue
        if (best is None or len(cycle) < len(best)) and _classify(graph, cycle, closing) == kind:
            best = cycle
    if best is None:
        return None
    return Cycle(kind, tuple(best), tuple(_steps(graph, best, closing)))


def _steps(graph: Graph, cycle: list[int], closing: Rel) -> list[Step]:
    """The step of each edge: the closing relation first, then the weakest each edge has."""
    out = [graph[cycle[0]][cycle[1]]["steps"][closing]]
    for a, b in itertools.pairwise(cycle[1:]):
        steps = graph[a][b]["steps"]
        out.append(steps[min(steps, key=lambda rel: _STRENGTH[rel])])
    return out


def _classify(graph: Graph, cycle: list[int], closing: Rel) -> str:
    rels = [s.rel for s in _steps(graph, cycle, closing)]
    anti = rels.count("rw")
    if anti == 0:
        return "G1c" if "wr" in rels else "G0"
    return "G-single" if anti == 1 else "G2-item"
