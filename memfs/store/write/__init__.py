"""The write path: how a change gets from a writer's request into the store's files,
checked, durable and committed, one store at a time.

* `batch`: the queue of a store's single-file changes; the first writer to arrive leads
  the batch and lands it for the others (`Queue`; a change is a `Request`, carried by a
  `Ticket` until the leader sets its `Answer`; ``APPEND``/``DELETE``/``REPLACE``).
* `landing`: a batch under the store lock: each change's version checked against what
  the writer saw (`check_version`, the one place a write is checked), its commit
  planned, then landed (`BatchLanding`).
* `staging`: new bytes written and fsynced beside the store before they are renamed in
  (`Staging`, `Staged`).
* `store`: one store's directory, lock, landing directory and history; the last step of
  a batch, a change of several files (`Store.land`), and finishing what a crash cut
  short (`Store`, `Landing`, `BatchPlan`, `GroupPlan`).
* `intents`: the intent of a landing under way, one file per store (`IntentFile`).
* `generation`: the counter every change of a store increments, for the other daemons
  on the root (`Generation`).

This ``__init__`` imports nothing: import the module you need.
"""
