"""ONNX Runtime backend package: export (torch -> ONNX decoder-with-past), providers, int8 quantization."""

from perfsuite.measure.backends.onnxruntime.backend import OrtBackend

__all__ = ["OrtBackend"]
