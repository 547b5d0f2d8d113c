"""kvcap: capacity planning for LLM serving with vLLM."""
