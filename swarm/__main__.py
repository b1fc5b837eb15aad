"""``python -m swarm`` runs the command line."""

from swarm.cli import main

main()
