"""``python -m engine_mlx ...``"""

from engine_mlx.cli import main

raise SystemExit(main())
