"""faultfs: a fault-injecting passthrough filesystem (FUSE) for a member's data directory.

`mount.py` starts and stops mounts, `control.py` talks to a running one, `rules.py` says what
a fault does, `state.py` applies the active rules to each operation, `bucket.py` paces rates,
`undo.py` drops unsynced writes on a power loss, `operations.py` is the filesystem itself.
Only the daemon imports the FUSE binding (mfusepy, over libfuse3).
"""
