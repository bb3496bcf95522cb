"""FlashChat's inference engine: MLX models decoded plainly or speculatively.

Importing this package first loads OpenBLAS on Linux (see ``backend``), so import it before
``mlx.core`` wherever speed matters. The public API is re-exported here; clients (CLI, bench,
app) use nothing else.
"""

from engine_mlx import backend as _backend  # noqa: F401  (OpenBLAS before mlx)
