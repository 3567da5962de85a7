"""`coordinator pipeline report`: the transaction lifecycle report.

run.py runs it and writes the outputs; input.py says what a run reads,
spark.py and arrow.py are its two engines (a Spark job, or threads of the
command), state.py keeps the closed hours' figures between runs, page.py
writes the HTML page. The reduction both engines run is ../figures.py.
"""

from coordinator.pipeline.report.run import (
    IN_PROCESS,
    SPARK,
    ReportOptions,
    ReportResult,
    database_now,
    run_report,
)

__all__ = ["IN_PROCESS", "SPARK", "ReportOptions", "ReportResult", "database_now", "run_report"]
