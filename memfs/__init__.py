"""memfs: shared memory for agents as plain files.

This package stays import-light on purpose: the client CLI (`memfs cat`) must start
fast, so nothing here imports the server stack (trio, pyfuse3, pydantic).
"""

__version__ = "0.1.0"
