"""The engine emulator: SGLang's and TensorRT-LLM's APIs over a model of an engine.

Place in the map (docs/architecture.md, "The emulator"): a separate program, started by
``swarm emulate`` (``swarm run`` with no target starts two as child processes), or in a thread
by the tests (``http_server.EmulatorThread``). Figures from it are always labelled as the
emulator's. This file imports nothing: starting one as a child process (``process``) does not
load the server into the load generator's process.
"""
