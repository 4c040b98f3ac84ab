"""The pure core: records, partitionings, statistics, prediction, search, planning.

Nothing here imports torch, streamlit or touches files (ARCHITECTURE.md, Layers).
"""
