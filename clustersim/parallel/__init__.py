"""The parallel configuration: pipeline schedules, stage splits, tensor parallelism,
placement of ranks on devices.

* :mod:`.schedules` -- the pipeline schedules (one file each, registered);
* :mod:`.stages` -- balanced stage splits and their checks;
* :mod:`.tensor_parallel` -- Megatron-LM's per-layer collectives;
* :mod:`.placement` -- ranks <-> (data, pipeline, tensor) coordinates on devices;
* :mod:`.batch_shares` -- the global batch shared among data-parallel ranks (even, by
  weights, by speed);
* :mod:`.rules` -- the one home of validity rules, used by plan, placement and strategies.
"""
