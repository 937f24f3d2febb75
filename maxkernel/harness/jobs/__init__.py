"""The code that runs inside a sandbox, the only code that imports a candidate: the child's entry point
(`worker.py`, its job table, start-time `timers.py`) and the job bodies (`*_job.py`). Nothing outside this room
imports it at module level; the parent starts a job by its name in the worker's table."""
