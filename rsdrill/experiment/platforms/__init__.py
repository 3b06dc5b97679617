"""Each platform's own part of the experiment file: its `target.<platform>` section, its
per-fault options, and `check_experiment(exp)`, the faults and engines it supports."""
