"""Reference engines for the flowpoint benchmark: Spark TWS / native Spark (spark_tws) and PyFlink
(pyflink_baseline, run in its own venv made by setup_pyflink.sh)."""
