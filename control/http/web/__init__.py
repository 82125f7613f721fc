"""The read-only web view at ``/ui/`` of the daemon's HTTP listener (see app.py).

Layers: ``app`` (routes, error pages, security headers), ``auth`` and ``signin``
(the sign-in form, web sessions, CSRF), ``look`` and ``views*`` (reading the memory
as the signed-in agent through the Dispatcher and the engine's non-recording reads),
``render`` and ``templating`` (safe HTML), ``live`` (commit notifications as
server-sent events). Templates and static files ship inside this package.
"""
