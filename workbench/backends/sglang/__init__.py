"""SGLang's backends: one module per graph buffer, allocator or pooled buffer SGLang ships.

Each module declares its backend (a ``TableBackend``, ``PooledBackend``, ``ReservationBackend`` or
allocator gathers) for the registry in ``workbench.backends``. Imported by the registry, analysis
and preflight (a backend's own types), and by the SGLang code of ``engines`` (conformance's calls
and learners); imports only the shared pieces of ``workbench.backends`` (``base``, ``pooled``,
``page_writes``, ``gather``) and ``model``, never the registry.
"""
