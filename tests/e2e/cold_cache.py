"""The run behind tests/e2e/test_run_cold_cache.py and test_run_warm_heir.py: a stepdown onto
the psa set's secondary under a read load, that secondary restarted first (cold) or not (warm).
Two files so that two xdist workers run the two halves side by side (30-35 s each)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rsdrill.analysis.latency import Takeover, takeover
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.history import History
from tests.e2e.catalog import changed


def stepdown_onto(tmp_path: Path, *, cold: bool) -> tuple[Takeover, int]:
    """The heir's takeover as the result's latency figures see it, and the read calls its
    volume's cap slowed (the throttle's own count: the mechanism, whatever the machine's load)."""
    # 4 MB at 50 read IOPS: the bench measured about 5 s of slow reads; the throttle holds
    # 12 s past the stepdown.
    spec: dict[str, Any] = changed(
        "seeds/parse-cold-secondary", **{"faults.1.duration": "17s", "slo": {}}
    )
    if not cold:  # no restart: the secondary wrote every record while replicating the preload
        spec["faults"] = [f for f in spec["faults"] if f["kind"] != "host-kill"]
    out = tmp_path / ("cold" if cold else "warm")
    result = run_experiment(
        Experiment.model_validate(spec),
        RunOptions(out_dir=out, live=False, journal_dir=out, assume_yes=True),
    )
    assert result.error is None, result.error
    recorded = json.loads((out / "sandbox" / "replset.json").read_text())
    assert recorded["cache_bytes"] == 32 * 1024 * 1024
    stepdown = next(f for f in result.faults if f.kind == "stepdown")
    throttle = next(f for f in result.faults if f.kind == "iops-throttle")
    assert stepdown.injected_at_s is not None
    taken = takeover(History.read_jsonl(out / "history.jsonl").ops(), stepdown.injected_at_s,
                     throttle.target)  # fmt: skip
    assert taken is not None, "no baseline, or the heir answered no read"
    return taken, int(throttle.detail["operations"].get("slowed", 0))
