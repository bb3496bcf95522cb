"""Runner scripts for the external benchmark baselines (see ``engine_mlx.bench.external``).

Each ``run_*.py`` runs as a script inside one implementation's own virtual environment,
never imported by engine_mlx: it may import only that environment's packages and the
stdlib-only ``_protocol`` beside it. Kept in the package so installs ship them.
"""
