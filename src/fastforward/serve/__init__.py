"""``fastforward serve``: an OpenAI-compatible HTTP server over the decoders, with Prometheus metrics.

- :mod:`~fastforward.serve.protocol`: request checking, OpenAI error shape, response and chunk bodies;
- :mod:`~fastforward.serve.engine`: the model worker thread, its bounded queue and cancellation;
- :mod:`~fastforward.serve.metrics`: the Prometheus series (vLLM-style names);
- :mod:`~fastforward.serve.app`: the FastAPI app, SSE streaming, and running it under uvicorn.

Nothing is imported here, so ``import fastforward.serve.protocol`` does not pull in FastAPI or uvicorn.
See docs/serving.md for usage.
"""
