"""Weight quantization recipes that turn a float checkpoint into a quantized one (no download, no calibration data)."""
