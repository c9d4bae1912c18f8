"""golden."""
