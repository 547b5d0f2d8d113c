"""End-to-end tests start a real vLLM (CPU build in .vllm-venv, see shared/docs/real-vllm.md): opt-in, `make e2e`."""
