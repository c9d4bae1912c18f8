"""The results format, on the ground floor: outcomes, typed records, the writer and the loader.

``device`` and ``conformance`` write these records; ``reports`` reads them. This package imports only
``golden`` (a case's description) and the standard library, so every layer may use it.
"""
