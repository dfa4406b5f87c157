"""The GPU tier: every generated kernel end to end through bin/fmha.exe (`pytest fmha_test.py`,
or `pytest tests/gpu`).

  contract.py      the console lines' regexes and the default tolerances (bench/ reads them too)
  driver.py        running fmha.exe
  manifest.py      the kernels under test (generated/manifest.json) and what each entry implies
  cases.py         a problem: Shape, Case and the flags they turn into
  matrix.py        the kernel x case table                 -> test_matrix.py
  perf_cases.py    the timed problems, or why a kernel has none -> test_perf.py
  save_configs.py  the -save-tensors problems              -> test_save_tensors.py
  oracle.py        attention in float64 for that re-check
  fixtures.py      the binary under test, the perf table's recorder
  test_dispatch.py which kernel runs without -kernel, the output format, exit code 1

tests/test_gpu_tables.py, test_oracle.py and test_contract.py check these tables and helpers
without a GPU.
"""
