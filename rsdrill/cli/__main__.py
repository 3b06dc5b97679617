"""`python -m rsdrill.cli`: the command line, started as the console script starts it."""

from rsdrill.cli.entry import main

main()
