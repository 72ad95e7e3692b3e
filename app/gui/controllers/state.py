"""The state browser's state, under the name its controller imports it by
(:mod:`app.gui.controllers.browser_state`); every other tab's state is in the module beside its
controller, the store catalog in :mod:`app.gui.controllers.catalog`."""

from __future__ import annotations

from statelens.app.gui.controllers.browser_state import BrowserState, backend_text

__all__ = ["BrowserState", "backend_text"]
