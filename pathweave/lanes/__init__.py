"""Ramiel: critical-path clusters mapped onto lanes (threads), hyperclusters for batch > 1, the lanes
executor and its readable generated code."""
