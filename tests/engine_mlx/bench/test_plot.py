"""The suite's plot: a panel per category, and a title that stays inside the figure."""

from __future__ import annotations

from matplotlib.figure import Figure

from engine_mlx.bench.plot import plot_suite


def test_suite_plot_wraps_a_long_machine_description(tmp_path, monkeypatch):
    rows = [
        {"impl": "flashchat", "mode": m, "width": 1, "category": c, "depth": d, "decode_tps": v}
        for c in ("math", "code")
        for d in (0, 1024)
        for m, v in (("ar", 9.0), ("mtp", 11.0))
    ]
    machine = "Intel(R) Xeon(R) Processor, Linux x86_64, 2 cores; MKL 2026.2, 2 threads " * 3
    report = {"model": "Qwen", "machine": machine, "backend": "cpu", "results": rows}
    titles: list[str] = []
    real_savefig = Figure.savefig

    def keep_title(fig, *args, **kwargs):
        titles.append(fig._suptitle.get_text())
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        box = fig._suptitle.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width  # inside the figure
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep_title)
    out = plot_suite(report, tmp_path / "suite.png")
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "\n" in titles[0] and titles[0].replace("\n", " ").startswith("Qwen on Intel")
