"""What people see: the report, its pages and figures, the notebooks' widgets and explorers.

Holds the report (``report``, ``report_page``, ``findings_page``, ``verdicts``, ``claims``), its
figures and words (``plots``, ``atlas_figure``, ``history_figure``, ``captions``, ``words``), the
notebooks' helpers and widgets (``notebook_params``, ``live``, ``explorer``, ``run_explorer``,
``preflight_box``).

The top of the package: imported only by the CLI and the notebooks; imports analysis, the
backends, ``model``, ``sim``, ``devices``, preflight, repro, ``engines.store`` and
``engines.commands`` (the release a command is read with).
"""
