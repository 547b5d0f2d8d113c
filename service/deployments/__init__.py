"""Registered deployments: what runs where, its traffic and where its live metrics come from."""
