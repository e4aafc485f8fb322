"""ASPEN: layers cut into tiles, a tile dataflow graph, native scheduling engines (``native/``) running
ready tiles with no barrier between layers."""
