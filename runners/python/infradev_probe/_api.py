"""``subject``: the probes' one way to reach the submission."""

from ._endpoint import Endpoint
from ._ranks import RankGroup


class Subject(Endpoint):
    """The submission, as the judge sees it. Everything goes through the broker."""

    # ---- rank groups -------------------------------------------------------------------------

    def ranks(self, world_size):
        """A group of ``world_size`` (2-4) ranks, each a subject sandbox of its own:
        ``with subject.ranks(2) as group: group.call_all("pkg.mod", "fn", [(a,), (b,)])``."""
        return RankGroup(world_size)


subject = Subject()
