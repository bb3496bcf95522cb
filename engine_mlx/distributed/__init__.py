"""One target split across processes (``mlx.launch``): rank 0 runs the engine, every other
rank runs a stage of the target's layers, over MLX's own distributed layer."""
