"""Model and GPU catalogs: storage, validation, the built-in data, HF config import and the in-memory snapshot."""
