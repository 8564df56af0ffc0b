"""The int8 calibration table of an ``int8-static`` MIGraphX cell, computed on the CPU with ORT's own calibrator.

Without a table, MIGraphX's ``migraphx_int8_enable=1`` silently runs the float graph (docs/recipes.md, "MIGraphX fp16
/ int8 and the option names"). The table is the one ``write_calibration_table`` writes (``calibration.flatbuffers``,
the TensorRT-style ``TrtTable`` of tensor name -> range, the EP's non-native format), from MinMax ranges of the cell's
own decoder export over its own input shapes: one prefill of seeded prompts and the decode steps that follow
(teacher-free: the float model's greedy tokens); it is cached beside the export.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from perfsuite.facts import cache_entry, models
from perfsuite.facts.cells import Cell
from perfsuite.measure.backends.onnxruntime import decoder_io
from perfsuite.measure.backends.onnxruntime import export as ex
from perfsuite.measure.backends.onnxruntime.quantize import quiet

CALIB_VERSION = 1
TABLE_FILE = "calibration.flatbuffers"
MARKER = "perfsuite-calibration.json"
DECODE_STEPS = 4  # decode steps fed after the prefill (their ranges differ from the prefill's)


def calibration_feeds(export: ex.ExportResult, cell: Cell) -> list[dict[str, np.ndarray]]:
    """The feeds of one generation at the cell's shapes: a prefill, then DECODE_STEPS decode steps (CPU EP)."""
    sc = cell.scenario
    prompt = np.array(models.prompts(sc.batch_size, sc.prompt_tokens, int(export.meta["geometry"]["vocab"]), seed=23),
                      dtype=np.int64)
    run = decoder_io.ort_greedy_steps(decoder_io.cpu_session(export.path), export.meta, prompt,
                                      steps=min(DECODE_STEPS, sc.new_tokens - 1),
                                      capacity=sc.prompt_tokens + sc.new_tokens)
    return [feeds for feeds, _ in run]


def table_for(export: ex.ExportResult, cell: Cell) -> Path:
    """The cached calibration table (``calibration.flatbuffers``) for the cell's float export, built on a miss."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator
    from onnxruntime.quantization.quant_utils import write_calibration_table

    sc, entry = cell.scenario, export.path.parent
    target = entry.parent / (f"{entry.name}-calib-minmax-b{sc.batch_size}-p{sc.prompt_tokens}-n{sc.new_tokens}"
                             f"-c{CALIB_VERSION}")
    meta = cache_entry.read_marker(target, MARKER)
    if (isinstance(meta, dict) and meta.get("export") == entry.name and TABLE_FILE in meta.get("files", {})
            and cache_entry.files_problem(target, meta["files"]) is None):
        return target / TABLE_FILE
    feeds = calibration_feeds(export, cell)
    with cache_entry.building(target) as tmp:
        with quiet():
            calibrator = create_calibrator(export.path, augmented_model_path=str(tmp / "augmented.onnx"),
                                           calibrate_method=CalibrationMethod.MinMax,
                                           providers=["CPUExecutionProvider"])
            # a CalibrationDataReader is anything with get_next() (its __subclasshook__), None at the end
            calibrator.collect_data(SimpleNamespace(get_next=partial(next, iter(feeds), None)))
            ranges = calibrator.compute_data()
            write_calibration_table(dict(ranges.data), dir=str(tmp))
        (tmp / "augmented.onnx").unlink(missing_ok=True)
        cache_entry.commit(tmp, target, {"export": entry.name, "method": "MinMax", "feeds": len(feeds),
                                         "tensors": len(ranges.data), "calib_version": CALIB_VERSION}, MARKER)
    return target / TABLE_FILE


def read_table(path: Path) -> dict[str, float]:
    """The ranges in a calibration table as the MIGraphX EP reads it (flatbuffers ``TrtTable``: name -> value)."""
    from onnxruntime.quantization.CalTableFlatBuffers import TrtTable

    table = TrtTable.TrtTable.GetRootAsTrtTable(Path(path).read_bytes(), 0)
    pairs = [table.Dict(i) for i in range(table.DictLength())]
    return {kv.Key().decode(): float(kv.Value()) for kv in pairs}
