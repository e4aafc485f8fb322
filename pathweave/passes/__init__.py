"""Graph rewrites shared by strategies, one pass per module (propose, then apply); ``pipeline`` lists
the fast CPU pipeline once."""
