"""Data movement, resample and sequence ops: generated from the catalogue by conformance/suite.py."""

from conformance.suite import group_tests_for

globals().update(group_tests_for(__name__))
