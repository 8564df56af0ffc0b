import time
import torch
from torch.profiler import profile, ProfilerActivity
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.measure import opprofile
from perfsuite.measure.backends import create
from perfsuite.facts import models
import dataclasses
cell = Cell("torch", "tiny-llama", "float32", Scenario("default", 1, 64, 32))
r = models.resolve(cell.model, None)
cell = dataclasses.replace(cell, model_dir=r.path)
be = create(cell, None); be.load()
prompts = models.prompts(1, 64, r.vocab_size, 0)
opprofile._generate(be, prompts, 32)
for gens in (1, 3):
    t0=time.monotonic()
    p = profile(activities=[ProfilerActivity.CPU]); p.__enter__()
    t1=time.monotonic()
    for _ in range(gens): opprofile._generate(be, prompts, 32)
    t2=time.monotonic()
    p.__exit__(None,None,None)
    t3=time.monotonic()
    ka = p.key_averages()
    t4=time.monotonic()
    n = len(p.events())
    t5=time.monotonic()
    print(f"gens {gens} enter {t1-t0:.2f} run {t2-t1:.2f} exit {t3-t2:.2f} key_avg {t4-t3:.2f} events {t5-t4:.2f} n={n}")
