"""CAPTURE (section III), the pure half: hybrid plans (``plan.py``: dp/tp/pp stages on a
mesh), their prediction from a profile's variants (``hybridcosts.py``), the plan a mesh
search recommends (``predict.py``), the mesh searches (``meshsearch.py``: a registry,
Algorithm 4 and the exact DP; a search in a file of its own is imported here), batch-size
scaling (``batchscale.py``, III-A2/B2) and the layer merger (``merging.py``, III-A3)."""
