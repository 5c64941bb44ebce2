"""The OpenAI-compatible proxy that stamps every generation request as a window, and where windows go."""
