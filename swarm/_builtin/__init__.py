"""Built-in agent profiles and topologies, installed here from the repo's agents/ and topologies/."""
