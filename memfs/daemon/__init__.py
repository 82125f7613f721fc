"""``memfs serve``: the daemon's composition root (`memfs.daemon.serve`), which opens
the socket, the listener, the engine, the memory model, the jail and the mount in the
order the privilege model needs, serves them in one trio nursery and stops them
cleanly; with what only it uses: the privileged phase and the drop
(`memfs.daemon.privilege`), the demo's config and contents (`memfs.daemon.demo`) and
readiness for systemd (`memfs.daemon.sdnotify`). With the CLI, it is the only part of
memfs that imports ``control``; in memfs only the CLI imports it."""
