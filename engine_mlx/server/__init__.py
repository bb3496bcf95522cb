"""A local OpenAI-compatible HTTP server over the engine (``python -m engine_mlx serve``).

- ``requests``: request bodies checked and turned into prompts and generation configs;
- ``runner``: one generation at a time on a worker thread, with a bounded queue;
- ``responses``: OpenAI-shaped responses and stream chunks, with FlashChat's statistics;
- ``access`` and ``guard``: what every request must pass first (Host, Origin, a JSON body of
  bounded size and arrival time), so no web page can drive the server and no body exhaust it;
- ``app``: the Starlette routes, the API key check and the uvicorn launcher;
- ``command``: the ``serve`` command's options and where its API key comes from.

Why Starlette and uvicorn: the server is a handful of routes and one streaming response, which
Starlette does with no framework on top (FastAPI's models would duplicate the request checks
``requests`` does with messages that name the field), and uvicorn is the ASGI server both are
normally run with.
"""
