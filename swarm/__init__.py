"""swarm: a load generator that sends agent-swarm traffic to LLM serving engines.

See docs/architecture.md for the map of the parts. Importing this package is cheap: heavy modules are
imported by the parts that need them.
"""

__version__ = "0.1.0"
