"""vllm-supervisor: keeps a vLLM model server in Docker alive 7x24 on a unified-memory box."""

__version__ = "0.1.0"
