"""One error family. Messages name the offending values (ARCHITECTURE.md, Style)."""


class McapError(Exception):
    """Bad input or an impossible request; the CLI exits 2, pages show st.error."""


class InvalidPartitioning(McapError):
    """A balance that does not fit the model: zero stages, wrong sum, ..."""


class InvalidStatistics(McapError):
    """Missing, NaN or negative layer statistics where they must be valid."""


class SchemaError(McapError):
    """A file of another schema or version, truncated or unreadable JSON."""


class StoreError(McapError):
    """A corrupt or foreign store file; nothing is overwritten."""


class UnknownModel(McapError):
    """A model spec naming an unknown model or parameter."""


class SearchTooLarge(McapError):
    """A search refused because its space exceeds the documented cap."""
