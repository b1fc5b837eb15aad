"""One module per serving engine: what swarm knows of it, declared once.

Place in the map (docs/architecture.md, "Engines"): ``engine.py`` holds the record every
engine fills in (``Engine``); ``sglang``, ``trtllm``, ``vllm`` and ``llamacpp`` each fill one;
``registry`` lists them. The clients, the probe, the emulator's profiles, the sweep's cache
reset and the engine-metrics reader all read these records. Importing this package loads
nothing but the standard library.
"""
