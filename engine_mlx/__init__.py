"""FlashChat's inference engine: MLX models decoded plainly or speculatively, losslessly.

Importing the package loads the CPU's matrix products before anything imports ``mlx.core``
(``blas``: the small-batch product and the fastest BLAS here), so import an ``engine_mlx``
module first wherever speed matters. Nothing is re-exported here;
clients (the CLI, the bench, the app) import what they use from its module:

- ``api``: load a target, its DFlash drafter and MTP head; encode a prompt or chat.
- ``session``: ``Session.generate`` turns prompt ids into ``events``; ``config`` says how.
- ``modes``: the decoding modes, their names, and which ones a model offers (no MLX).
- ``stats``: the statistics' definitions; ``events``: what a generation yields.
- ``library``: the model library (hub downloads, imports, the catalog); ``demo``: the
  bundled demo model. ``bench``: benchmarks; ``training``: drafter and MTP training.

The README's "How the code is laid out" section maps the layers.
"""

from engine_mlx.blas import preload

preload()
