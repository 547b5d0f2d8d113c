"""Alembic's migration environment and revisions, shipped inside the package so an installed kvcap can migrate
(``kvcap migrate``; ``service.db.migrate`` points Alembic's ``script_location`` here)."""
