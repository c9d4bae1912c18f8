"""Ops with quantized (Q4_0/Q8_0) signatures (test_quantized): generated from the catalogue by conformance/suite.py."""

from conformance.suite import group_tests_for

globals().update(group_tests_for(__name__))
