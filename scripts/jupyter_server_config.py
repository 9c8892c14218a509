"""JupyterLab's server configuration for this checkout: workbench notebooks are saved without outputs.

``scripts/setup.sh`` links this file into ``.venv/etc/jupyter/`` (a folder the venv's
``jupyter lab`` reads its configuration from), so ``.venv/bin/jupyter lab notebooks/`` saves each
workbench notebook in its committed form (``scripts/nbstrip.py``): running and autosaving leave
``git status`` clean. Nothing of workbench (nor torch) is imported into the server.
"""

import runpy
from pathlib import Path

c = get_config()  # noqa: F821 -- traitlets' config loader defines it
HERE = Path(__file__).resolve().parent  # scripts/ of the checkout (resolve() follows the venv's link)
c.ContentsManager.pre_save_hook = runpy.run_path(str(HERE / "nbstrip.py"))["pre_save_hook"]
