"""FlashChat's desktop app (PySide6). Talks to the engine only through ``engine_mlx``'s API,
and only from a worker thread."""
