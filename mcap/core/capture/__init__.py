"""CAPTURE (section III), the pure half: hybrid plans (``plan.py``: dp/tp/pp stages on a
mesh), their prediction from a profile's variants (``predict.py``), the mesh searches
(``meshsearch.py``: a registry, Algorithm 4 and the exact DP), batch-size scaling
(``batchscale.py``, III-A2/B2) and the layer merger (``merging.py``, III-A3)."""
