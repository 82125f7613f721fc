"""The read-only, per-agent pyfuse3 view of the stores, current files only: `view`
(`MemoryView`, the request handlers and the identity checks) builds its parts `nodes`
(the inode table and the attributes handed to the kernel) and `cache` (what the kernel
caches, kept truthful across commits); `errors` turns exceptions into errnos, `scans`
tells reads from scans, `stats` counts requests; `mount` mounts the view (through
fusermount3 and its `guardian`, or as a FUSE session that `attach`, the system
service's root helper, mounts). It uses memfs.store and the modules beside it (config,
places, service_user), never control nor the daemon."""
