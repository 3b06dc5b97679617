"""Local replica sets of real member processes: the toolkit's built-in target.

`config` describes a set (shared by the launcher and every member), `cluster` launches and
controls the member processes, `emulator` is the built-in MongoDB-wire-compatible member, and
`mongod` runs real mongod members instead when one is on PATH.
"""
