"""Database plumbing with no domain knowledge: declarative base, engines and the per-request unit of work."""
