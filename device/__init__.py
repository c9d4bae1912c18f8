"""device."""
