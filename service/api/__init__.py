"""Shared web kit: dependencies, error rendering, pagination, ETags, health. No domain imports."""
