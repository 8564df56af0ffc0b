import time, torch, dataclasses
from torch.profiler import profile, ProfilerActivity
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.measure import opprofile
from perfsuite.measure.backends import create
from perfsuite.facts import models
cell = Cell("torch", "tiny-llama", "float32", Scenario("default", 1, 64, 32))
r = models.resolve(cell.model, None)
cell = dataclasses.replace(cell, model_dir=r.path)
be = create(cell, None); be.load()
prompts = models.prompts(1, 64, r.vocab_size, 0)
opprofile._generate(be, prompts, 32)
with profile(activities=[ProfilerActivity.CPU]) as p:
    for _ in range(3): opprofile._generate(be, prompts, 32)
t=time.monotonic(); ops, calls = opprofile.self_times(e for e in p.profiler.kineto_results.events() if e.device_type()==torch.autograd.DeviceType.CPU); t1=time.monotonic()
ka = p.key_averages(); t2=time.monotonic()
ref = {e.key: e.self_cpu_time_total/1e3 for e in ka if e.self_cpu_time_total>0}
rc = {e.key: e.count for e in ka if e.self_cpu_time_total>0}
print(f"raw {t1-t:.2f} s, key_averages {t2-t1:.2f} s; ops equal: {set(ops)==set(ref)}; max rel diff {max(abs(ops[k]-ref[k])/ref[k] for k in ref):.2e}; calls equal: {calls==rc}")
print({k:(calls[k],rc[k]) for k in rc if calls[k]!=rc[k]})
