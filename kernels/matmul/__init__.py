"""matmul: its spec, every implementation and its tests, in one folder."""
