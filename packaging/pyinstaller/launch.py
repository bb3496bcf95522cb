"""The bundled executable's entry point: FlashChat's window (``app.__main__``), or, as
``flashchat -m MODULE ARGS`` the way ``python -m`` would run it, any of the bundle's modules:
the engine re-runs itself that way (the BLAS probe), and ``flashchat -m engine_mlx serve``
is the command line without a Python installation."""

import runpy
import sys

if len(sys.argv) > 2 and sys.argv[1] == "-m":
    module = sys.argv[2]
    sys.argv = [sys.argv[0], *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    sys.exit(0)

from app.__main__ import main  # after the -m dispatch, which must import nothing

sys.exit(main())
