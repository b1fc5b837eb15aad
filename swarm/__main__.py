"""``python -m swarm`` runs the command line.

Place in the map (docs/architecture.md, "CLI").
"""

from swarm.cli import main

main()
