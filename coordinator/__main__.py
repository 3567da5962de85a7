"""`python -m coordinator`: the `coordinator` command."""

from coordinator.cli import main

main()
