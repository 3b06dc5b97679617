"""Probes record; they never judge. `ProbeSet` builds the ones an experiment asks for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pymongo import MongoClient, WriteConcern
from pymongo.errors import PyMongoError

from rsdrill.connection import ConnectOptions
from rsdrill.history import History, RunClock, shard_write_probe
from rsdrill.probes import causal, transactions
from rsdrill.probes.availability import PROBE_DB, ReadLoop, WriteLoop
from rsdrill.probes.base import Probe
from rsdrill.probes.check import CheckLoop
from rsdrill.probes.durability import readback
from rsdrill.probes.failover import HelloStream
from rsdrill.probes.lag import LagPoller
from rsdrill.probes.load import build_load, preload
from rsdrill.probes.raw_write import RawWriteLoop
from rsdrill.probes.recovery import StatusPoller
from rsdrill.probes.register import REGISTER_ID, RegisterReader, RegisterWriter
from rsdrill.probes.shards import chunks_to_balance, place_chunks, spread_over_shards
from rsdrill.probes.stall import StallProbe

if TYPE_CHECKING:
    from rsdrill.experiment.probes import Probes
    from rsdrill.layout import ShardedLayout


class ProbeSet:
    """Every probe of one run: prepared, started together, stopped together."""

    def __init__(
        self,
        config: Probes,
        *,
        uri: str,
        members: list[str],
        options: ConnectOptions,
        history: History,
        run_id: str,
        seed: int = 0,
        standalone: bool = False,
        layout: ShardedLayout | None = None,
    ) -> None:
        self.config = config
        self.uri = uri
        self.members = members
        # How the probes that ask members directly reach them (the target's TLS and login).
        self.options = options
        self.history = history
        self.clock = RunClock.start()
        self.prefix = f"run_{run_id}"
        self.seed = seed
        # A standalone server has no replication to measure: no lag probe.
        self.standalone = standalone
        # A sharded target: a write probe per shard too; no lag or raw-write probe (both
        # compare a set's members, and the members here are several sets').
        self.layout = layout
        self._shard_ids: dict[str, int] = {}
        self.probes: list[Probe] = []
        self.ledger: WriteLoop | None = None
        self._clients: list[MongoClient[dict[str, Any]]] = []

    def prepare(self) -> None:
        """Create what the probes read, before the measured window opens."""
        client: MongoClient[dict[str, Any]] = MongoClient(self.uri, serverSelectionTimeoutMS=30_000)
        with client:
            db = client[PROBE_DB]
            db.get_collection(f"{self.prefix}_read", write_concern=WriteConcern("majority")
                              ).replace_one({"_id": 1}, {"_id": 1}, upsert=True)  # fmt: skip
            # The write probes' collections too, before any fault: else the first insert of one
            # (the raw writer's, which writes only while the driver's writes fail) may create
            # it on a primary cut off, and that primary's rollback takes the creation with its
            # documents: its rollback folder then names a collection UUID no member lists.
            if self.layout is None:
                listed = set(db.list_collection_names())
                for name in self._written_collections():
                    if name not in listed:
                        db.create_collection(name, write_concern=WriteConcern("majority"))
        a = self.config.availability
        if self.layout is not None and a is not None and a.writes:
            self._shard_ids = place_chunks(self.uri, f"{self.prefix}_shards",
                                           list(self.layout.shards))  # fmt: skip
        if self.layout is not None and self.config.durability is not None:
            chunks_to_balance(self.uri, self._ledger_collection())
        if self.config.consistency is not None:
            with MongoClient(self.uri, serverSelectionTimeoutMS=30_000) as client:
                client[PROBE_DB].get_collection(
                    f"{self.prefix}_register", write_concern=WriteConcern("majority")
                ).replace_one({"_id": REGISTER_ID}, {"_id": REGISTER_ID, "v": 0}, upsert=True)
        if self.config.transactions is not None:
            transactions.prepare(self.uri, f"{self.prefix}_txn")
            if self.layout is not None:
                spread_over_shards(self.uri, f"{self.prefix}_txn")
        if self.config.causal is not None:
            causal.prepare(self.uri, f"{self.prefix}_causal", self.config.causal.clients)
        if self.config.load is not None:
            load = self.config.load
            preload(self.uri, f"{self.prefix}_load", load.records, load.record_bytes)

    def start(self, clock: RunClock) -> None:
        """Build every probe on the run's clock and start them together."""
        self.clock = clock
        self._build()
        for probe in self.probes:
            probe.start()

    def _build(self) -> None:
        c = self.config
        # Always: whether this process ran is what every other probe's figures rest on.
        self.probes.append(StallProbe(self.history, self.clock))
        writes: WriteLoop | None = None
        if c.availability is not None:
            a = c.availability
            if a.writes:
                writes = WriteLoop("write", self.history, self.clock, uri=self.uri,
                                   collection=f"{self.prefix}_write", interval_s=a.interval,
                                   timeout_s=a.timeout, w=a.write_concern, journal=a.journal,
                                   retries=a.retries)  # fmt: skip
                self.probes.append(writes)
                for shard, first_id in self._shard_ids.items():
                    self.probes.append(
                        WriteLoop(shard_write_probe(shard), self.history, self.clock, uri=self.uri,
                                  collection=f"{self.prefix}_shards", interval_s=a.interval,
                                  timeout_s=a.timeout, w=a.write_concern, journal=a.journal,
                                  retries=a.retries, id_base=first_id)
                    )  # fmt: skip
                if a.raw_writes and self.layout is None:
                    self.probes.append(
                        RawWriteLoop(self.history, self.clock, members=self.members,
                                     collection=f"{self.prefix}_raw_write",
                                     interval_s=a.interval, timeout_s=a.timeout,
                                     w=a.write_concern, journal=a.journal, options=self.options,
                                     driver_writes=writes)
                    )  # fmt: skip
            if a.reads:
                self.probes.append(
                    ReadLoop(self.history, self.clock, uri=self.uri,
                             collection=f"{self.prefix}_read", interval_s=a.interval,
                             timeout_s=a.timeout, read_preference=a.read_preference,
                             retries=a.retries, read_tags=a.read_tags)
                )  # fmt: skip
        if c.durability is not None:
            d, collection = c.durability, self._ledger_collection()
            if collection == f"{self.prefix}_write" and writes is not None:
                # The same acknowledgement, so the same promise: no writes of its own.
                self.ledger = writes
            else:
                self.ledger = WriteLoop(
                    "ledger", self.history, self.clock, uri=self.uri,
                    collection=collection, interval_s=d.interval,
                    timeout_s=d.timeout, w=d.write_concern, journal=d.journal,
                    retries=d.retries,
                )  # fmt: skip
                self.probes.append(self.ledger)
        for member in self.members:
            stream = None
            if c.failover is not None:
                stream = HelloStream(self.history, self.clock, member=member,
                                     interval_s=c.failover.interval,
                                     timeout_s=c.failover.timeout,
                                     max_await_s=c.failover.max_await,
                                     options=self.options)  # fmt: skip
                self.probes.append(stream)
            if c.recovery is not None:
                self.probes.append(
                    StatusPoller(self.history, self.clock, member=member,
                                 interval_s=c.recovery.interval, timeout_s=c.recovery.timeout,
                                 options=self.options, watch=stream)
                )  # fmt: skip
        if c.lag is not None and not self.standalone and self.layout is None:
            self.probes.append(
                LagPoller(self.history, self.clock, members=self.members,
                          interval_s=c.lag.interval, timeout_s=c.lag.timeout,
                          options=self.options)
            )  # fmt: skip
        for name, check in c.checks.items():
            self.probes.append(CheckLoop(name, self.history, self.clock, check, self.uri))
        if c.consistency is not None:
            r = c.consistency
            self.probes += [
                probe(self.history, self.clock, uri=self.uri, collection=f"{self.prefix}_register",
                      interval_s=r.interval, timeout_s=r.timeout)
                for probe in (RegisterWriter, RegisterReader)
            ]  # fmt: skip
        if c.transactions is not None:
            t = c.transactions
            appends = transactions.Appends()
            self.probes += [
                transactions.ListAppendClient(
                    self.history, self.clock, uri=self.uri, collection=f"{self.prefix}_txn",
                    client_id=i, keys=t.keys, txn_len=t.txn_len, appends=appends,
                    interval_s=t.interval, timeout_s=t.timeout, seed=self.seed,
                )
                for i in range(t.clients)
            ]  # fmt: skip
        if c.causal is not None:
            cs = c.causal
            self.probes += [
                causal.CausalClient(
                    self.history, self.clock, uri=self.uri, collection=f"{self.prefix}_causal",
                    client_id=i, clients=cs.clients, read_preference=cs.read_preference,
                    read_concern=cs.read_concern, write_concern=cs.write_concern,
                    interval_s=cs.interval, timeout_s=cs.timeout,
                )
                for i in range(cs.clients)
            ]  # fmt: skip
        if c.load is not None:
            ld = c.load
            client, workers = build_load(
                self.history, self.clock, uri=self.uri, collection=f"{self.prefix}_load",
                workload=ld.workload, rate=ld.rate, threads=ld.threads, records=ld.records,
                record_bytes=ld.record_bytes, distribution=ld.distribution,
                timeout_s=ld.timeout, w=ld.write_concern, seed=self.seed,
            )  # fmt: skip
            self._clients.append(client)
            self.probes.extend(workers)

    def _written_collections(self) -> list[str]:
        """The collections the write probes of a replica set insert into."""
        a, names = self.config.availability, []
        if a is not None and a.writes:
            names.append(f"{self.prefix}_write")
            if a.raw_writes:
                names.append(f"{self.prefix}_raw_write")
        if self.config.durability is not None:
            names.append(self._ledger_collection())
        return sorted(set(names))

    def _ledger_collection(self) -> str:
        """The durability ledger's collection: the availability probe's writes' when they make
        the same promise (the same write concern), else its own."""
        return (
            f"{self.prefix}_write" if self.config.ledger_shares_writes else f"{self.prefix}_ledger"
        )

    def write_loops(self) -> list[WriteLoop]:
        """The probes that insert `{_id: seq}` (the ledger too, when it writes on its own)."""
        return [p for p in self.probes if isinstance(p, WriteLoop)]

    def stop(self, *, readback_timeout_s: float, drop: bool = True) -> None:
        """Stop every probe, read the ledger back, release connections, drop probe data
        (unless `drop` is false: the data audit reads it first, then `drop_probe_collections`)."""
        for probe in self.probes:
            probe.stop()
        for probe in self.probes:
            probe.join(timeout=30)
        if self.ledger is not None:
            readback(self.ledger, readback_timeout_s)
        for probe in self.probes:
            probe.close()
        for client in self._clients:
            client.close()
        if drop:
            self.drop_probe_collections()

    def drop_probe_collections(self) -> None:
        try:
            # Bounded as a whole (timeoutMS): a set with no majority left would stall the drop.
            client: MongoClient[dict[str, Any]] = MongoClient(
                self.uri, serverSelectionTimeoutMS=5000, timeoutMS=10_000
            )
            with client:
                db = client[PROBE_DB]
                for name in db.list_collection_names():
                    if name.startswith(self.prefix):
                        db.drop_collection(name)
        except PyMongoError:
            pass  # leftover probe documents are harmless; the run's result is what matters
