import time, sys, json
t0=time.monotonic()
import torch, transformers
t1=time.monotonic()
from perfsuite.facts.cells import Cell, Scenario
from perfsuite.measure import opprofile
from perfsuite.measure.backends import create
import perfsuite.measure.backends as B
from perfsuite.facts import models
cell = Cell("torch", "tiny-llama", "float32", Scenario("default", 1, 64, 32))
t2=time.monotonic()
r = models.resolve(cell.model, None)
import dataclasses
cell = dataclasses.replace(cell, model_dir=r.path)
be = create(cell, None); be.load()
t3=time.monotonic()
prompts = models.prompts(1, 64, r.vocab_size, 0)
opprofile._generate(be, prompts, 32)
t4=time.monotonic()
out = opprofile.torch_ops(lambda: sum(opprofile._generate(be, prompts, 32) for _ in range(3)), "cpu", None)
t5=time.monotonic()
for _ in range(3): opprofile._generate(be, prompts, 32)
t6=time.monotonic()
print(f"import {t1-t0:.2f} perfsuite {t2-t1:.2f} load {t3-t2:.2f} warm {t4-t3:.2f} prof3 {t5-t4:.2f} plain3 {t6-t5:.2f}")
