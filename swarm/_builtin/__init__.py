"""Built-in agent profiles and topologies, installed here from the repo's agents/ and topologies/.

Place in the map (docs/architecture.md, "Shared value types"): found by ``workload.catalog``.
"""
