"""The macOS bundle cannot be built here (PyInstaller builds for the platform it runs on), so
its recipe is checked by reading: ``flashchat.spec`` is executed as PyInstaller would on a
Mac, with PyInstaller's build steps recorded instead of run, and ``build_dmg.sh`` is parsed
and held to the same names and paths."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "packaging" / "pyinstaller" / "flashchat.spec"
DMG_SCRIPT = ROOT / "packaging" / "macos" / "build_dmg.sh"

pytestmark = pytest.mark.slow  # the spec collects every module of mlx, mlx-lm and the app: ~30 s


class _Step:
    """What a PyInstaller build step returns: the attributes the next steps read."""

    pure: list = []  # noqa: RUF012  (read only)
    scripts: list = []  # noqa: RUF012
    binaries: list = []  # noqa: RUF012
    datas: list = []  # noqa: RUF012


def _recorder(name: str, calls: dict[str, tuple[tuple, dict]]):
    """One PyInstaller build step (Analysis, PYZ, EXE, COLLECT, BUNDLE): its arguments kept."""

    def step(*args: Any, **kwargs: Any) -> _Step:
        calls[name] = (args, kwargs)
        return _Step()

    return step


@pytest.fixture
def darwin_spec(monkeypatch) -> dict[str, tuple[tuple, dict]]:
    """The spec run as on a Mac: ``sys.platform`` is "darwin" while it runs."""
    pytest.importorskip("PyInstaller")
    monkeypatch.setattr(sys, "platform", "darwin")
    calls: dict[str, tuple[tuple, dict]] = {}
    names = ("Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE")
    scope = {"SPECPATH": str(SPEC.parent), **{n: _recorder(n, calls) for n in names}}
    exec(compile(SPEC.read_text(), str(SPEC), "exec"), scope)
    return calls


def test_the_spec_builds_an_apple_silicon_app_from_files_that_exist(darwin_spec):
    _, kwargs = darwin_spec["BUNDLE"]
    assert kwargs["name"] == "FlashChat.app"
    assert kwargs["bundle_identifier"] == "app.flashchat.FlashChat"
    plist = kwargs["info_plist"]
    assert plist["LSArchitecturePriority"] == ["arm64"]
    assert plist["CFBundleDocumentTypes"][0]["CFBundleTypeExtensions"] == ["gguf"]
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", kwargs["version"])
    _, exe = darwin_spec["EXE"]
    assert exe["console"] is False  # a Mac app opens no terminal
    analysis_args, analysis = darwin_spec["Analysis"]
    assert all(Path(script).is_file() for script in analysis_args[0])
    sources = [Path(src) for src, _dest in analysis["datas"] if str(ROOT) in src]
    assert sources and all(p.exists() for p in sources), [p for p in sources if not p.exists()]
    bundled = {dest for _src, dest in analysis["datas"]}
    assert {"metal_kernels", "resources/companions", "resources/icons"} <= bundled


def test_the_dmg_script_parses_and_packs_the_app_the_spec_names(darwin_spec):
    subprocess.run(["bash", "-n", str(DMG_SCRIPT)], check=True)
    script = DMG_SCRIPT.read_text()
    makefile = (ROOT / "Makefile").read_text()
    distpath = re.search(r"--distpath (\S+)", makefile).group(1)
    app = f"{distpath}/{darwin_spec['BUNDLE'][1]['name']}"
    assert f"APP={app}" in script
    assert "CFBundleShortVersionString" in script  # the version PyInstaller writes
    assert '[[ "$(uname -m)" == "arm64" ]]' in script
