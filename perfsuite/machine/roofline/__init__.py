"""The roofline: the device's limits measured when a run starts (peaks), a datasheet per device, and each cell's
share of them (annotate)."""
