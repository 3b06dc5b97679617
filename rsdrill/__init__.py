"""rsdrill: chaos experiments for MongoDB replica sets, with failover and recovery measured."""

__version__ = "0.1.0"
