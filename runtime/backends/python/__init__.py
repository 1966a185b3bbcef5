"""Triton's Python backend: ``model.py``'s ``TritonPythonModel`` served from worker
processes, one per instance (``backend.py`` the server's side, ``worker.py`` the process,
``channel.py`` what crosses between them, ``pb_utils.py`` the
``triton_python_backend_utils`` module the model imports)."""
