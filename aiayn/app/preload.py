"""Every library and module the app's model pages import, imported in one go (``import aiayn.app.preload``).

Why (a class on a freshly started server): Streamlit runs each session's page in a thread of its own,
so on a cold server several threads import numpy, pandas, plotly (whose submodules load lazily) and torch at
the same time, each holding the import locks of the modules it is in the middle of. CPython breaks the
resulting lock cycles by handing one thread a half-initialised module: with three sessions opening the
explorer and Translate at once, two of three pages failed with "partially initialized module 'numpy' has no
attribute 'ndarray'" or "cannot import name 'app' from 'aiayn'" (reproduced three times out of three).

The cure is to import all of it while holding only one lock: this module's. Every page under ``pages/`` imports
it as its first import, and :func:`aiayn.app.warm_imports` imports it in the background; a thread that finds
another one importing it waits on this module's lock while holding no other, so no cycle can form. The Overview
(``app.py``) does not import it: it shows no model and stays free of torch (the background import then
brings torch in while the Overview is read). Not a paper section: the serving job.
"""
from __future__ import annotations

import os

# The server's torch threads (AIAYN_TORCH_THREADS, aiayn.app.models.serving_threads: two by default) sleep while
# they wait instead of spinning, unless OMP_WAIT_POLICY says otherwise (with one thread there is nothing to spin). A spinning thread on a shared 2-core
# machine holds a core that another process needs, then waits for its partner to be scheduled: with spinning threads
# a class's batch took several times as long as with one thread (docs/benchmarks.md, "Classroom on the paper-size
# model, third round"). libgomp reads the variable once, when torch loads it: hence here, before the server's first
# ``import torch``. A short spin first (``GOMP_SPINCOUNT``) makes a lone batch faster but, with a browser on the same
# cores, no class faster (docs/benchmarks.md, "eighth round"), so it is left to the user's environment.
if os.environ.get("AIAYN_TORCH_THREADS", "").strip() != "1":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# third-party libraries first, in the order the modules below would import them
import numpy  # noqa: F401
import pandas  # noqa: F401
import plotly.graph_objects  # noqa: F401
import plotly.io  # noqa: F401
import plotly.subplots  # noqa: F401
import torch  # noqa: F401

# then the package: everything a page imports at its top
import aiayn.analysis  # noqa: F401
import aiayn.app  # noqa: F401
import aiayn.app.ablation  # noqa: F401
import aiayn.app.explorer  # noqa: F401
import aiayn.app.history  # noqa: F401
import aiayn.evaluation.modelcard  # noqa: F401
import aiayn.examples  # noqa: F401
import aiayn.figures.attention  # noqa: F401
import aiayn.figures.compare  # noqa: F401
import aiayn.figures.labs  # noqa: F401
import aiayn.figures.rollout  # noqa: F401
import aiayn.lessons  # noqa: F401
import aiayn.model.config  # noqa: F401
import aiayn.model.maps  # noqa: F401
import aiayn.training.recipe  # noqa: F401
import aiayn.translator  # noqa: F401
