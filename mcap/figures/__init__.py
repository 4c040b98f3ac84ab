"""The dashboard's figures, one module per figure family (optuna's visualization style).

Every figure is a pure *data* function returning a frozen dataclass or a pandas
DataFrame (tested for equality) and a *draw* function returning a plotly Figure
(smoke-tested). Memory stays int bytes in the data; only the drawings format it.
Nothing here imports streamlit or torch, or reads files.
"""
