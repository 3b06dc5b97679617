"""The platforms: one package each (its option models, target, injectors, preflight, client),
and `base.py`, the interfaces the runner and the experiment model know them by."""
