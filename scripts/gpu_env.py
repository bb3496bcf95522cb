"""MLX's CUDA build in a virtual environment, for the scripts run on a lent NVIDIA machine
(``gpu_kernel_check.py``, ``gpu_train_pair.py``).

The environment also sees the packages of the Python that launches it (a GPU image's numpy and
nvidia-* libraries). MLX comes from the package index, or on a machine without network from
wheels in a folder (``mlx`` for the machine's Python, ``mlx-cuda-13`` or ``-12``, ``mlx-lm``;
installed with --no-deps, so the CUDA libraries must be there already), and any other wheels
in that folder (``gpu_parts.sh`` puts the engine's other runtime packages there).
"""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

MLX_VERSION = "0.32.4"
MLX_LM_VERSION = "0.32.2"


def run(cmd: list[str], **kwargs) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)


def install(venv: Path, wheels: str | None, cuda: str, skip: bool = False) -> Path:
    """The environment's Python, MLX's CUDA build installed in it (unless ``skip``)."""
    python = venv / "bin" / "python"
    if not python.exists():
        run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
        # The launching interpreter may itself be a venv (a GPU image's PyTorch one): make its
        # packages visible too, after the new venv's own.
        code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        own = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
        parents = {p for p in site.getsitepackages() if Path(p).is_dir()}
        (Path(own.stdout.strip()) / "_flashchat_parent.pth").write_text("\n".join(sorted(parents)))
    if skip:
        return python
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if wheels:
        wanted = [
            f"mlx=={MLX_VERSION}",
            f"mlx-cuda-{cuda}=={MLX_VERSION}",
            f"mlx-lm=={MLX_LM_VERSION}",
        ]
        run([*pip, "--no-index", "--no-deps", "--find-links", wheels, *wanted])
        # the engine's other runtime packages, where the folder has them (gpu_parts.sh's)
        others = sorted(str(w) for w in Path(wheels).glob("*.whl") if not w.name.startswith("mlx"))
        if others:
            run([*pip, "--no-index", "--no-deps", *others])
    else:
        run([*pip, f"mlx[cuda{cuda}]=={MLX_VERSION}", f"mlx-lm=={MLX_LM_VERSION}"])
        run([*pip, "pytest", "hypothesis"])
    return python
