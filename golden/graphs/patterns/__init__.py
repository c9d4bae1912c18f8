"""Graph pattern modules: each has a ``PATTERNS`` list, collected by ``golden/graphs/registry.py``."""
