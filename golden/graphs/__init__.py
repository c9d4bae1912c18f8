"""The graph tier's golden side: graph cases (``case.py``) and the pattern registry (``patterns.py``).

A package of its own so that the catalogue's scan of ``golden`` (which imports every module to find
op families) does not import these modules while the catalogue is still being built.
"""
