"""``paper``: mCAP's Listing 1.1 (section 3.3) over the profile's own statistics."""
from __future__ import annotations

from mcap.core.costs import AdditiveCosts
from mcap.core.predict import cost_table
from mcap.core.predictors.base import Predictor, register
from mcap.core.types import Profile


@register
class Paper(Predictor):
    name = "paper"
    label = "paper (Listing 1.1)"
    help = ("mCAP's Listing 1.1: mem_isolated of the stage's first layer plus mem_added of the "
            "others, read from the profile's statistics (3.3).")

    def fit(self, profile: Profile) -> AdditiveCosts:
        return AdditiveCosts(cost_table(profile.stats), self.name)
