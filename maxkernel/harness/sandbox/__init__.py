"""What keeps a candidate in: the worker pool and its bubblewrap/seccomp sandbox (`pool.py`, `seccomp.py`), the
source allow-list run before a kernel's import (`static_check.py`), the audit hook armed in a job (`guard.py`),
taking files out of a scratch folder (`copyout.py`), cancel scopes (`cancel.py`) and the sweep of roots left by a
dead process (`stale.py`). Imports nothing else of the harness."""
