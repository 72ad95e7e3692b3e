"""One controller per tab of the main window, and what they share.

Each controller owns its view (from :mod:`viewers`), the jobs it runs through the window's
:class:`~app.gui.workers.JobRunner` and the state they leave; it talks to the window only through the
narrow :class:`~app.gui.controllers.context.WindowContext` and its own signals, never through another
controller's attributes. What a controller remembers, and the decisions that need no widget, live in a
Qt-free state object beside it (``growth_state.py`` beside ``growth.py``) that the controller renders;
the store catalog their pickers share is :mod:`~app.gui.controllers.catalog`.
"""
