"""Side-by-side benchmark of bin/fmha.exe and PyTorch SDPA: suites (data), run.py (runner),
report.py (CSV and markdown), plot.py (PNG, also offline from a CSV)."""
