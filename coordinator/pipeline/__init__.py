"""The data pipeline over the coordinator's tables: lifecycle report (on Spark or
in-process), archive to Parquet, audit (Spark jobs)."""
