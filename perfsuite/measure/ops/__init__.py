"""Operator coverage: hypothesis-driven shape tests of LLM inference ops across backends (docs/ops.md)."""
