"""The workload: what a swarm sends, as a pure function of its spec and seed.

Place in the map (docs/architecture.md, "Workload"): specs and agent profiles, topologies, arrival
processes, distributions, text synthesis, the tokenizer, prompts and the prefix index.
"""
