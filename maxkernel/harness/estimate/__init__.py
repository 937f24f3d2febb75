"""The TPU estimate without a TPU: fit, floors and cache (`estimator.py`), shared facts of the estimate's jobs
(`facts.py`), each op's trip count from compiled HLO (`hlo_loops.py`) and profile parsing (`xplane.py`). Its
planning and profiling jobs are `jobs/estimate_job.py` and `jobs/estimate_compile_job.py`."""
