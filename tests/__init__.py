"""The test tree. A package so that its modules have one import name each (tests.gpu.driver for
pytest, fmha_test.py and bench/run.py alike), whatever else is installed under `tests`."""
