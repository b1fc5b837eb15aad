"""The engine emulator: SGLang's and TensorRT-LLM's APIs over a model of an engine.

Place in the map (docs/architecture.md, "The emulator"): a separate program, started by
``swarm emulate`` (``swarm run`` with no target starts two as child processes), or in a thread
by the tests. Figures from it are always
labelled as the emulator's.
"""

from swarm.emulator.config import EmulatorConfig
from swarm.emulator.server import EmulatorThread, RunningEmulator, start_emulator

__all__ = ["EmulatorConfig", "EmulatorThread", "RunningEmulator", "start_emulator"]
