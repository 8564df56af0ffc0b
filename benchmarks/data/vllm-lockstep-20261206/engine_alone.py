"""One vLLM engine of the smoke cell alone: where a lockstep pair's ~33 s go (engine_alone.txt)."""
import json
import time

T0=time.perf_counter()
def t(msg): print(f'{time.perf_counter()-T0:7.2f} s {msg}', flush=True)
def main():
    from perfsuite.facts import models
    t("perfsuite facts")
    t("vllm import")
    import subprocess
    import sys

    from perfsuite.measure.backends import create
    from perfsuite.measure.worker.job import cell_from_dict
    plan = json.loads(subprocess.run([sys.executable,"-m","perfsuite.measure.worker","plan", json.dumps({"backend":"vllm"})],capture_output=True,text=True).stdout.strip().splitlines()[-1])
    t("plan")
    cell = cell_from_dict(plan["cells"][0])
    resolved = models.resolve(cell.model, None)
    import dataclasses
    cell = dataclasses.replace(cell, model_dir=resolved.path)
    t("model resolved")
    b = create(cell, None)
    b.load()
    t("engine loaded")
    from perfsuite.measure import loop
    prompts = models.prompts(cell.scenario.batch_size, cell.scenario.prompt_tokens, resolved.vocab_size, cell.seed)
    for i in range(3):
        g = loop.generate(b, prompts, cell.scenario.new_tokens)
        t(f"gen {i} e2el {g.e2el_s*1e3:.1f} ms ttft {g.ttft_s*1e3:.1f}")
        # (the kept output came from a version that called the settle-wait try here: b.settle())
    b.close()
    t("closed")
if __name__=='__main__':
    main()
