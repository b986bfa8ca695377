"""`keras-gradmon report`: a training-health report from TensorBoard logs.

`load_runs` reads event files with TensorBoard's own reader, `analyze_run`
turns one run's numbers into a `RunReport` (pure NumPy), and `render`
writes the console text, PNG plots and a self-contained HTML page.
"""
