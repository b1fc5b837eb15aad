"""swarm: a load generator that sends agent-swarm traffic to LLM serving engines.

Place in the map (docs/architecture.md, "Shared value types"): the package root; the map of the parts is
that page. Importing this package is cheap: heavy modules are
imported by the parts that need them.
"""

__version__ = "0.1.0"
