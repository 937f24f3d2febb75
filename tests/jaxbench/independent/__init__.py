"""Independent implementations of the real-world suite's operators, one module per task (tests only).

Each is written from the operator's published definition (the paper's equations, the model's own reference code
read for facts), never transcribed from the task's `baseline.py`, and in another form where one exists (a
sequential recurrence against a scan or chunked form, explicit loops against einsums), in numpy float64. A module
defines:

- `reference(*inputs, config)`: the outputs for the task's inputs (numpy arrays: floats as float64, integers
  kept), `config` the task's dims at that size; a tuple when the workload returns several outputs.
- `DTYPE` (optional): the dtype `create_inputs` is asked for (default float32, so the comparison measures the
  operator, not bfloat16 rounding); None keeps the task's own (for int8/fp8 inputs).
- `TOLERANCE` (optional): the largest error allowed, relative to max|reference| per output (default 2e-4).
- `check(got, want, config)` (optional): replaces the element-wise comparison (e.g. top-k indices with ties).
- `BREAKS`: the production lines this reference was proven to catch (the baseline edited, the test then failed).
"""
