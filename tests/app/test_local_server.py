"""Settings → "Serve on localhost": the loaded model answers the real ``openai`` client while
the window runs; the speed panel shows the request; the chat and its history are untouched;
web pages and foreign host names are refused as ``serve`` refuses them."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import replace

import httpx
import openai

from app.settings_dialog import SettingsDialog


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serving_from_the_window(qtbot, make_window, monkeypatch) -> None:
    win = make_window()
    port = _free_port()
    dialog = SettingsDialog(replace(win.settings, serve_enabled=True, serve_port=port), win)
    chosen = dialog.result_settings()
    assert chosen.serve_enabled and chosen.serve_port == port
    monkeypatch.setattr(SettingsDialog, "exec", lambda self: True)
    monkeypatch.setattr(SettingsDialog, "result_settings", lambda self: chosen)
    win.open_settings()
    assert win.server_label.text() == f"Serving on http://127.0.0.1:{port}/v1"

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    result: dict = {}

    def ask() -> None:  # off the GUI thread, so the window keeps handling events
        try:
            model = client.models.list().data[0].id
            result["reply"] = client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "Hello there"}],
                temperature=0,
                max_tokens=12,
            )
        except Exception as exc:  # reported by the assertion below
            result["error"] = exc

    with qtbot.waitSignal(win.worker.served, timeout=60000):  # the panel hears of it
        thread = threading.Thread(target=ask)
        thread.start()
    qtbot.waitUntil(lambda: not thread.is_alive(), timeout=60000)
    assert "error" not in result, result.get("error")
    reply = result["reply"]
    assert reply.choices[0].message.content and reply.usage.completion_tokens >= 1
    qtbot.waitUntil(lambda: "Last reply" in win.panel.summary_label.text(), timeout=10000)
    assert win.conversation_id is None and win.conversations.list.count() == 0

    url = f"http://127.0.0.1:{port}/v1/chat/completions"  # a page's text/plain POST, and parts
    body = json.dumps({"model": reply.model, "messages": [{"role": "user", "content": "Hi"}]})
    for headers, status in (
        ({"Host": "evil.example", "Content-Type": "application/json"}, 403),
        ({"Origin": "https://evil.example", "Content-Type": "application/json"}, 403),
        ({"Content-Type": "text/plain"}, 415),
    ):
        refused = httpx.post(url, content=body, headers=headers, timeout=30)
        assert refused.status_code == status and refused.json()["error"]["message"]

    taken = socket.socket()  # a port in use is said in the window, nothing crashes
    taken.bind(("127.0.0.1", 0))
    busy = replace(chosen, serve_port=taken.getsockname()[1])
    monkeypatch.setattr(SettingsDialog, "result_settings", lambda self: busy)
    win.open_settings()
    assert "Cannot serve on port" in win.error_label.text()
    assert not win.local_server.running and not win.server_label.isVisible()
    taken.close()
