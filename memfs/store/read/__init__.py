"""The read path: what a file's version is, what each agent has seen of it, and the
bytes and lines handed back.

* `versions`: a file's version (its blake3 digest and stamp, kept in an xattr and
  cached) and how to pin it (`Version`, `Pinned`, `FileInfo`, `version_of`,
  `version_at`, `digest_bytes`, `digest_fd`, `stamp`, `appending`).
* `seen`: per-agent records of the version each agent last read: where a read is
  recorded, and what a later write is checked against (`SeenRecords`).
* `pages`: pages of lines from an open file without reading it whole (`Page`,
  `read_page`).
* `unrecorded`: the web view's reads, which check access and record nothing
  (`UnrecordedReads`).
* `near`: the "did you mean" names of a `NotFound`, from what the agent can see
  (`no_store`, `no_path`).
* `lru`: the bounded, thread-safe cache the version and git-object readers use (`LRU`).

This ``__init__`` imports nothing: import the module you need.
"""
