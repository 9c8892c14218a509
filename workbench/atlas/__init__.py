"""The atlas over releases: every modelled backend x engine release x graph mode, at realistic
settings (``rows``: can a real run fail, where, how; ``pooled`` and ``reqtable``: the flat buffers and
the request table's own rows; ``releases``: consecutive releases that agree, as one), the history of
the bug class release by release (``history``), the findings a report leads with (``findings``), and
the cache that keeps these by the content they come from (``result_cache``, ``results``;
``boundaries``: each table state's executed boundary, by state and code), and each release's reach
rule read once per atlas (``reaches``).

Imported by ``present`` (the notebooks' figures and the report), ``repro`` (a finding's reproducer),
``cli`` and ``analysis.bench`` (the atlas's timing); it imports ``analysis`` (boundaries, reach,
probes), ``engines`` (learned releases, start-up refusals), ``backends``, ``model`` and ``sim``, never
``present``.
"""
