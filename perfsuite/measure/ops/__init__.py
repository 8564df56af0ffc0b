"""Operator coverage: hypothesis-driven shape tests of LLM inference ops across backends (docs/ops.md).

Modules: ``registry`` (ops, float64 references, per-backend implementations), ``shapes`` (LLM-shaped hypothesis
strategies, shape classes), ``tolerance`` (the dtype/reduction-length rule), ``runner`` (run + classify one cell),
``worker`` (subprocess runner for risky cells), ``sweep`` + ``matrix`` (``perfsuite ops``), ``known_gaps``
(per-runner-class xfail lists), ``profiles`` (hypothesis profiles), ``ort_adapter`` (single-op ORT sessions via
``perfsuite.measure.backends.onnxruntime.providers``), ``decoder_sweep`` (exported decoder over drawn shapes).
"""
