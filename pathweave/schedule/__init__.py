"""Plans: which lane runs which node, in what order, and where lanes hand values to each other.

- ``cluster.linear_clustering``: Ramiel's critical-path linear clustering (Alg. 1).
- ``cluster.merge_clusters``: merging clusters whose schedules do not overlap (Alg. 2-3).
- ``lanes.map_to_lanes``: ours: clusters onto P lanes by list scheduling on measured costs.
- ``plan.LanePlan``: the result, which verifies itself.
"""

from __future__ import annotations

from .cluster import linear_clustering, merge_clusters
from .lanes import map_to_lanes, plan_lanes
from .plan import LanePlan

__all__ = ["LanePlan", "linear_clustering", "map_to_lanes", "merge_clusters", "plan_lanes"]
