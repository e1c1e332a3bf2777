"""Calibration: real ranks measured, the measurements fitted to a cost model, and predictions set beside runs.

    calibrate.py   ping-pong measurements on a TorchWorld fitted to a cost model (``python -m simulator calibrate``)
    costfile.py    a calibrated cost model read from and written to a JSON file
    probes.py      the rank programs that measure: messages, additions and matrix products, timed
    fit.py         straight lines fitted to message times, with the sizes where they bend
    prediction.py  a simulation's predicted times set beside a real run's measured ones

It sits above ``simulator.real`` (it launches real ranks to measure them). Importing it does not import torch.
"""

__all__: list[str] = []  # each module is imported by name (measuring needs torch, an optional extra)
