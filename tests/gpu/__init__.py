"""The GPU tier: every generated kernel end to end through bin/fmha.exe (`pytest fmha_test.py`,
or `pytest tests/gpu`).

  contract.py      the console lines' regexes and the default tolerances (shared with bench/)
  driver.py        running fmha.exe
  manifest.py      the kernels under test (generated/manifest.json) and what each entry implies
  cases.py         a problem: Shape, Case and the flags they turn into
  matrix.py        the kernel x case table (test_matrix.py)
  perf_cases.py    the timed problems (test_perf.py)
  save_configs.py  the -save-tensors problems (test_save_tensors.py)
  oracle.py        attention in float64, for the -save-tensors re-check
  fixtures.py      the binary under test and the perf table's recorder
"""
