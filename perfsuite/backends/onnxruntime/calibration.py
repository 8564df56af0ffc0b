"""The int8 calibration table of an ``int8-static`` MIGraphX cell, computed on the CPU with ORT's own calibrator.

MIGraphX's execution provider quantizes a float graph to int8 only when it is given a calibration table
(``migraphx_int8_calibration_table_name``); without one, ``migraphx_int8_enable=1`` silently runs the float graph
(``int8_enable_ && int8_calibration_cache_available_`` in migraphx_execution_provider.cc). Its non-native table
format is the one ``onnxruntime.quantization.quant_utils.write_calibration_table`` writes (``calibration.flatbuffers``,
the TensorRT-style ``TrtTable`` of tensor name -> range). perfsuite computes it here, on the CPU EP, from MinMax
ranges of the cell's own decoder export over the cell's own input shapes: one prefill of seeded prompts and the
decode steps that follow (teacher-free: the float model's greedy tokens), and caches it beside the export.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from perfsuite import cache_entry
from perfsuite.backends.onnxruntime import decoder_io
from perfsuite.backends.onnxruntime import export as ex
from perfsuite.backends.onnxruntime.quantize import quiet_root_logger
from perfsuite.cells import Cell

CALIB_VERSION = 1
TABLE_FILE = "calibration.flatbuffers"
MARKER = "perfsuite-calibration.json"
DECODE_STEPS = 4  # decode steps fed after the prefill (their ranges differ from the prefill's)


def table_dir(export: ex.ExportResult, cell: Cell) -> Path:
    sc = cell.scenario
    entry = export.path.parent
    return entry.parent / f"{entry.name}-calib-minmax-b{sc.batch_size}-p{sc.prompt_tokens}-n{sc.new_tokens}-c{CALIB_VERSION}"


def calibration_feeds(export: ex.ExportResult, cell: Cell, steps: int = DECODE_STEPS) -> list[dict[str, np.ndarray]]:
    """The feeds of one generation at the cell's shapes: a prefill, then ``steps`` decode steps (CPU EP)."""
    import onnxruntime as ort

    from perfsuite import models

    meta = export.meta
    sc = cell.scenario
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(export.path), so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    cap = sc.prompt_tokens + sc.new_tokens if decoder_io.layout_of(meta) == "static" else None
    prompt = np.array(models.prompts(sc.batch_size, sc.prompt_tokens, int(meta["geometry"]["vocab"]), seed=23),
                      dtype=np.int64)
    feeds = [decoder_io.step_feeds(names, prompt, 0, decoder_io.empty_past(meta, sc.batch_size, cap or 0), cap)]
    out = sess.run(None, feeds[0])
    past_len = sc.prompt_tokens
    for _ in range(min(steps, sc.new_tokens - 1)):
        feeds.append(decoder_io.step_feeds(names, np.asarray(out[1]).reshape(-1, 1), past_len, list(out[2:]), cap))
        out = sess.run(None, feeds[-1])
        past_len += 1
    return feeds


def table_for(export: ex.ExportResult, cell: Cell) -> Path:
    """The cached calibration table (``calibration.flatbuffers``) for the cell's float export, built on a miss."""
    from onnxruntime.quantization.calibrate import CalibrationDataReader, CalibrationMethod, create_calibrator
    from onnxruntime.quantization.quant_utils import write_calibration_table

    target = table_dir(export, cell)
    meta = cache_entry.read_marker(target, MARKER)
    if (isinstance(meta, dict) and meta.get("export") == export.path.parent.name and TABLE_FILE in meta.get("files", {})
            and cache_entry.files_problem(target, meta["files"]) is None):
        return target / TABLE_FILE
    feeds = calibration_feeds(export, cell)

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds)

        def get_next(self) -> dict[str, Any] | None:
            return next(self.it, None)

    tmp = cache_entry.new_tmp(target)
    try:
        with warnings.catch_warnings(), quiet_root_logger():
            warnings.simplefilter("ignore")
            calibrator = create_calibrator(export.path, augmented_model_path=str(tmp / "augmented.onnx"),
                                           calibrate_method=CalibrationMethod.MinMax,
                                           providers=["CPUExecutionProvider"])
            calibrator.collect_data(_Reader())
            ranges = calibrator.compute_data()
            write_calibration_table(dict(ranges.data), dir=str(tmp))
        (tmp / "augmented.onnx").unlink(missing_ok=True)
        cache_entry.commit(tmp, target, {"export": export.path.parent.name, "method": "MinMax", "feeds": len(feeds),
                                         "tensors": len(ranges.data), "calib_version": CALIB_VERSION}, MARKER)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target / TABLE_FILE


def read_table(path: Path) -> dict[str, float]:
    """The ranges in a calibration table as the MIGraphX EP reads it (flatbuffers ``TrtTable``: name -> value)."""
    from onnxruntime.quantization.CalTableFlatBuffers import TrtTable

    buf = Path(path).read_bytes()
    table = TrtTable.TrtTable.GetRootAsTrtTable(buf, 0)
    out = {}
    for i in range(table.DictLength()):
        kv = table.Dict(i)
        out[kv.Key().decode()] = float(kv.Value())
    return out
