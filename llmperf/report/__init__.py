"""HTML reports with PNG plots: one run, a sweep (Hydra multirun), or several runs side by side.

    build_run_report(run_dir)                 -> run_dir/report.html
    build_sweep_report(sweep_dir)             -> sweep_dir/sweep.csv and sweep_dir/report.html
    build_comparison_report(run_dirs, out)    -> out/report.html

Pages are self-contained files that open from disk with no network: CSS inline, PNGs in a
plots/ folder beside report.html (copy the folder, not the file alone).
"""
