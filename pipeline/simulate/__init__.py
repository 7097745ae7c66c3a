"""A provider simulator for testing prompt-cache measurements: no inference, each provider's
caching rules (DeepSeek, OpenAI, Anthropic), a deterministic tokenizer, realistic usage fields
and SSE streams. `cacheaudit simulate serve` runs it on loopback."""

from pipeline.simulate.server import RULES, Simulator, SimulatorSettings, running, serve

__all__ = ["RULES", "Simulator", "SimulatorSettings", "running", "serve"]
