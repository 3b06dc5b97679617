"""The `rsdrill` command line (Typer): `app.py` is the entry point, one module per command group."""
