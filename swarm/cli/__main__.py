"""``python -m swarm.cli`` runs the command line.

Place in the map (docs/architecture.md, "CLI").
"""

from swarm.cli import main

main()
