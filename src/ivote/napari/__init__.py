"""napari integration: thin widgets, readers, writers and sample data (no math here)."""
