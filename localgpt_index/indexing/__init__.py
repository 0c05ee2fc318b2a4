"""`lgpt-index build` and the other writers of an index: plan, engines, the commit policy, remove and upgrade."""
