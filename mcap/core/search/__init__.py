"""Search methods (mCAP 3.4), one file each, registered in ``base`` (ARCHITECTURE.md):

* ``exact``  -- min-max DP over stage costs with the sorted-vector tie-break (exact.py);
  ``evaluated`` counts DP transitions (stage placements), not partitionings.
* ``bf``     -- the paper's brute force over all C(L-1, G-1) partitionings (bruteforce.py).
* ``bo``     -- Bayesian optimisation (bayes.py): settings="tuned" (default) or "paper"
  (scikit-optimize with the paper's settings); on demand.
* ``uniform``, ``params``, ``time`` -- baselines (uniform.py, params.py, time.py).
* today's splits of LLMs (issue 41), baselines too: DeepSpeed's ``uniform`` (uniform.py)
  and ``parameters`` (``params``, params.py), its ``type:REGEX`` (``type``, typed.py),
  torchtitan's even blocks (``titan``, titan.py) and Megatron-LM's (``megatron``,
  megatron.py); ``type``, ``titan`` and ``megatron`` take an argument after a colon
  (``base.choose``).

The tie-break and the tolerance are documented in ``tiebreak.py``; exact and bf apply the
band around the true optimum, bo around the best peak it evaluated. The one entry is
``mcap.core.recommend.recommend`` (re-exported here).
"""
from mcap.core.search import exact, bruteforce, bayes, time, uniform, params, typed, titan, megatron  # noqa: F401  (registration, in report order)
from mcap.core.search.base import (DEFAULT, REGISTRY, Method, SearchContext, choose, describe, get, names,
                                   reference, register)
from mcap.core.search.tiebreak import key

METHODS = names()


def recommend(*args, **kwargs):
    """``mcap.core.recommend.recommend`` (the one entry)."""
    from mcap.core.recommend import recommend as entry
    return entry(*args, **kwargs)


__all__ = ["DEFAULT", "METHODS", "REGISTRY", "Method", "SearchContext", "choose", "describe", "get", "key", "names", "recommend",
           "reference", "register"]
