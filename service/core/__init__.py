"""The pure capacity core: stdlib only, no I/O. Every term of the KV-cache formula is one named function."""
