"""What the sandbox and local platforms share: faults on member processes of this machine
(signals, faultfs under the data directory, nftables on loopback) and their load-time checks."""
