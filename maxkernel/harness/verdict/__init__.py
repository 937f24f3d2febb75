"""Judging a candidate: `evaluate.py` (the parent's side of a verdict), the verdict's records (`result.py`), the
census of a lowering (`audit.py`, `integrity.py`), tolerances (`numerics.py`), named configs (`configs.py`), the check
size (`checksize.py`), the library kernels named (`library.py`), the candidate/judge pair and the long-lived judge
(`judge_pair.py`, `handoff.py`, `judge_service.py`), arrays on disk (`arrays.py`) and a folder task's facts
(`task_facts.py`). The jobs reuse its checks; it never imports a job."""
