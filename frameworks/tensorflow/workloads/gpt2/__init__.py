"""GPT-2: the decoder-only language model (GPT-2 small on OpenWebText) — model and backend."""
