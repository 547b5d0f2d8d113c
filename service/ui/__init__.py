"""The plan explorer: a page served by kvcap itself at ``/ui`` that draws what the public API returns."""
